#include "megaqwen/util/thread_pool.h"

#include <algorithm>

namespace megaqwen {

namespace {
// The chunk of [0, n) that participant `index` of `parts` runs, aligned to `grain`.
std::pair<size_t, size_t> chunk_of(size_t n, size_t grain, int index, int parts) {
  size_t units = (n + grain - 1) / grain;
  size_t begin = units * size_t(index) / size_t(parts) * grain;
  size_t end = units * size_t(index + 1) / size_t(parts) * grain;
  return {std::min(begin, n), std::min(end, n)};
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t grain) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  if (workers_.empty() || n <= grain) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    task_ = &fn;
    task_n_ = n;
    task_grain_ = grain;
    pending_ = int(workers_.size());
    ++generation_;
  }
  work_ready_.notify_all();
  auto [begin, end] = chunk_of(n, grain, 0, size());
  if (begin < end) fn(begin, end);
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [this] { return pending_ == 0; });
  task_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  unsigned long seen = 0;
  for (;;) {
    const std::function<void(size_t, size_t)>* task;
    size_t n, grain;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      task = task_;
      n = task_n_;
      grain = task_grain_;
    }
    auto [begin, end] = chunk_of(n, grain, index, size());
    if (begin < end) (*task)(begin, end);
    {
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) work_done_.notify_one();
    }
  }
}

}  // namespace megaqwen

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

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls `done` for up to ThreadPool::kSpin, pausing between polls; true if it became true. It does
// not yield the core: measured, yielding made parallel loops slower on a loaded machine (the short
// kSpin is what keeps a spinning thread from holding the core its worker is queued for).
template <typename Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + ThreadPool::kSpin;
  for (unsigned i = 1;; ++i) {
    if (done()) return true;
    cpu_relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true);
  { std::lock_guard lock(mutex_); }  // a worker between its check and its wait gets the notify
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
  task_ = &fn;
  task_n_ = n;
  task_grain_ = grain;
  pending_.store(int(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  { std::lock_guard lock(mutex_); }
  work_ready_.notify_all();
  auto [begin, end] = chunk_of(n, grain, 0, size());
  if (begin < end) fn(begin, end);
  auto all_done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(all_done)) {
    std::unique_lock lock(mutex_);
    work_done_.wait(lock, all_done);
  }
  task_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  unsigned long seen = 0;
  for (;;) {
    auto woken = [&] {
      return stopping_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(woken)) {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, woken);
    }
    if (stopping_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    auto [begin, end] = chunk_of(task_n_, task_grain_, index, size());
    if (begin < end) (*task_)(begin, end);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      { std::lock_guard lock(mutex_); }
      work_done_.notify_one();
    }
  }
}

}  // namespace megaqwen

// ThreadPool: a fixed set of workers for the CPU engine's data-parallel loops.
// parallel_for splits [0, n) into contiguous chunks, one per worker, and blocks until all are done;
// the calling thread runs a chunk itself, so a pool of 1 is the plain serial loop.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace megaqwen {

class ThreadPool {
 public:
  explicit ThreadPool(int threads = 0);  // 0: one per hardware thread
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // fn(begin, end) over disjoint chunks covering [0, n); chunks are multiples of `grain`.
  void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t grain = 1);

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_, work_done_;
  const std::function<void(size_t, size_t)>* task_ = nullptr;
  size_t task_n_ = 0, task_grain_ = 1;
  unsigned long generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
};

}  // namespace megaqwen

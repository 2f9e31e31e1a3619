// ThreadPool: a fixed set of workers for the CPU engine's data-parallel loops.
// parallel_for splits [0, n) into contiguous chunks, one per worker, and blocks until all are done;
// the calling thread runs a chunk itself, so a pool of 1 is the plain serial loop.
//
// A decode step is ~200 parallel_for calls of 0.05-0.2 ms each, back to back. Waking a sleeping
// thread through a futex costs tens of microseconds on a VM, so workers (and the caller waiting for
// them) spin for a short while (kSpin) before they block on a condition variable. Short, because on
// a machine busier than the pool a spinning thread takes the core from the one it waits for:
// measured (docs/PERFORMANCE.md), 20 us decodes as fast as 200 us on an idle machine and as fast as
// not spinning at all on a loaded one, where 200 us made a parallel loop 3x slower.
#pragma once

#include <atomic>
#include <chrono>
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

  // How long an idle thread polls for the next task before it sleeps.
  static constexpr std::chrono::microseconds kSpin{20};

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;  // guards the sleeps: taken by a sleeper's predicate check and before each notify
  std::condition_variable work_ready_, work_done_;
  // The task is written before generation_ is incremented (release) and read after it is seen (acquire).
  const std::function<void(size_t, size_t)>* task_ = nullptr;
  size_t task_n_ = 0, task_grain_ = 1;
  std::atomic<unsigned long> generation_{0};
  std::atomic<int> pending_{0};  // workers still running the current task
  std::atomic<bool> stopping_{false};
};

}  // namespace megaqwen

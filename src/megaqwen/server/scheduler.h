// Scheduler: the engine runs one sequence at a time, so requests wait in a bounded FIFO queue and a
// single worker thread, which owns the engine's Generator, runs them in arrival order. Keeping one
// Generator means a prompt that extends the previous request's prompt only prefills the new part; the
// prompt cache keeps other conversations' sequences so they can take turns.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "megaqwen/engine/generator.h"
#include "megaqwen/engine/prompt_cache.h"
#include "megaqwen/server/generation_job.h"

namespace megaqwen::server {

class Scheduler {
 public:
  // on_done runs on the worker after each job that ran (metrics).
  // prompt_cache: conversations set aside between requests (prompt_cache.h; budget 0 turns it off).
  Scheduler(Engine& engine, size_t max_queued, std::function<void(const GenerationJob&)> on_done = {},
            PromptCacheOptions prompt_cache = {});
  ~Scheduler();  // stop()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues the job; false when the queue is full (or the scheduler stopped).
  bool submit(std::shared_ptr<GenerationJob> job);
  // Queues the jobs one after another (a request's n choices: they run back to back, so each after the
  // first finds the prompt in the cache), all or none: false when the queue cannot take them all.
  bool submit(const std::vector<std::shared_ptr<GenerationJob>>& jobs);
  size_t queued() const;
  size_t running() const;
  PromptCacheStats prompt_cache_stats() const { return prompt_cache_.stats(); }
  // Cancels every job, queued or running, and joins the worker (which first writes the prompt cache
  // to its folder, when it has one).
  void stop();

 private:
  void work();

  Generator generator_;
  PromptCache prompt_cache_;  // used by the worker only; stats() is thread-safe
  const size_t max_queued_;
  std::function<void(const GenerationJob&)> on_done_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<GenerationJob>> queue_;
  std::shared_ptr<GenerationJob> current_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace megaqwen::server

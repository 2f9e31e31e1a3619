#include "megaqwen/server/scheduler.h"

#include <exception>

namespace megaqwen::server {

Scheduler::Scheduler(Engine& engine, size_t max_queued, std::function<void(const GenerationJob&)> on_done,
                     PromptCacheOptions prompt_cache)
    : generator_(engine),
      prompt_cache_(prompt_cache, engine.state_memory()),
      max_queued_(max_queued),
      on_done_(std::move(on_done)) {
  worker_ = std::thread([this] { work(); });
}

Scheduler::~Scheduler() { stop(); }

bool Scheduler::submit(std::shared_ptr<GenerationJob> job) { return submit(std::vector{std::move(job)}); }

bool Scheduler::submit(const std::vector<std::shared_ptr<GenerationJob>>& jobs) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || queue_.size() + jobs.size() > max_queued_) return false;
    queue_.insert(queue_.end(), jobs.begin(), jobs.end());
  }
  wake_.notify_one();
  return true;
}

size_t Scheduler::queued() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

size_t Scheduler::running() const {
  std::lock_guard lock(mutex_);
  return current_ ? 1 : 0;
}

void Scheduler::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !worker_.joinable()) return;
    stopping_ = true;
    for (auto& job : queue_) job->cancel();
    if (current_) current_->cancel();
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void Scheduler::work() {
  for (;;) {
    std::shared_ptr<GenerationJob> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping and drained
      job = std::move(queue_.front());
      queue_.pop_front();
      current_ = job;
    }
    if (job->start()) {
      try {
        prompt_cache_.prepare(generator_, job->request());
        GenerationResult result = generator_.run(
            job->request(), [&](int32_t token, std::string_view text) { return job->on_token(token, text); },
            [&](const TokenLogprob& logprob, bool of_prompt) { job->on_logprob(logprob, of_prompt); });
        job->finish(std::move(result));
      } catch (const std::exception& e) {
        // The cache may hold a half-prefilled prompt: start the next request from scratch.
        generator_.reset();
        prompt_cache_.forget_resident();
        job->fail(e.what());
      }
      if (on_done_) on_done_(*job);
    }
    std::lock_guard lock(mutex_);
    current_.reset();
  }
  // With a prompt cache folder, the conversations outlive the server (stop() waits for this).
  prompt_cache_.persist(generator_);
}

}  // namespace megaqwen::server

#include "megaqwen/server/generation_job.h"

namespace megaqwen::server {

void GenerationJob::cancel() {
  cancelled_ = true;
  changed_.notify_all();
}

GenerationJob::State GenerationJob::wait(std::chrono::milliseconds timeout, Update& update) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return !pending_.text.empty() || state_ == State::Done; });
  update.text += pending_.text;
  for (auto list : {&Update::prompt_logprobs, &Update::logprobs}) {
    auto& from = pending_.*list;
    auto& to = update.*list;
    to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
    from.clear();
  }
  pending_.text.clear();
  return state_;
}

bool GenerationJob::withdraw() {
  std::lock_guard lock(mutex_);
  if (state_ != State::Queued) return false;
  cancelled_ = true;
  return true;
}

bool GenerationJob::start() {
  std::lock_guard lock(mutex_);
  if (cancelled_ || Clock::now() >= deadline_) {
    state_ = State::Done;
    error_ = ApiError(503, cancelled_ ? "the request was cancelled" : "the request timed out waiting in the queue",
                      "server_error", "", "queue_timeout");
    changed_.notify_all();
    return false;
  }
  state_ = State::Running;
  return true;
}

bool GenerationJob::on_token(int32_t token, std::string_view text) {
  {
    std::lock_guard lock(mutex_);
    if (token >= 0 && first_token_seconds_ < 0)
      first_token_seconds_ = std::chrono::duration<double>(Clock::now() - arrived_).count();
    pending_.text += text;
  }
  if (!text.empty()) changed_.notify_all();
  return !cancelled_ && Clock::now() < deadline_;
}

void GenerationJob::on_logprob(const TokenLogprob& logprob, bool of_prompt) {
  std::lock_guard lock(mutex_);
  (of_prompt ? pending_.prompt_logprobs : pending_.logprobs).push_back(logprob);
}

void GenerationJob::finish(GenerationResult result) {
  {
    std::lock_guard lock(mutex_);
    result_ = std::move(result);
    state_ = State::Done;
  }
  changed_.notify_all();
}

void GenerationJob::fail(std::string message) {
  {
    std::lock_guard lock(mutex_);
    error_ = ApiError(500, std::move(message), "server_error");
    state_ = State::Done;
  }
  changed_.notify_all();
}

}  // namespace megaqwen::server

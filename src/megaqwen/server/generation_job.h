// GenerationJob: one request's generation, handed from an HTTP thread to the engine's worker. The
// worker appends text as tokens come and finally the result (or an error); the HTTP thread waits for
// either, and cancels the job when its client goes away. Deadlines bound a job's whole life: past
// it, a queued job is dropped and a running one stops at its next token.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "megaqwen/engine/generator.h"
#include "megaqwen/server/api_error.h"

namespace megaqwen::server {

class GenerationJob {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State { Queued, Running, Done };

  GenerationJob(GenerationRequest request, Clock::time_point deadline)
      : request_(std::move(request)), deadline_(deadline), arrived_(Clock::now()) {}

  const GenerationRequest& request() const { return request_; }
  Clock::time_point arrived() const { return arrived_; }
  Clock::time_point deadline() const { return deadline_; }

  // --- HTTP side ---
  void cancel();
  bool cancelled() const { return cancelled_; }
  // What the worker produced since the last wait(): text, and the logprobs of scored prompt tokens and
  // of generated tokens (a token's logprob arrives before its text, which a stop string or an
  // unfinished character may hold back).
  struct Update {
    std::string text;
    std::vector<TokenLogprob> prompt_logprobs, logprobs;
  };
  // Waits until new text, the end, or `timeout`; appends what came to `update` and returns the state.
  State wait(std::chrono::milliseconds timeout, Update& update);
  // Stops a job that has not started yet (its deadline passed in the queue); false when it already runs.
  bool withdraw();
  // Valid once Done: the result, or the error that ended the job (503 when it expired or was
  // cancelled in the queue, 500 when the engine failed).
  const GenerationResult& result() const { return result_; }
  const std::optional<ApiError>& error() const { return error_; }
  // Arrival to the first generated token in seconds; < 0 when none came.
  double first_token_seconds() const { return first_token_seconds_; }

  // --- worker side ---
  bool start();                                   // false: cancelled or expired, do not run it
  bool on_token(int32_t token, std::string_view text);  // false: stop generating
  void on_logprob(const TokenLogprob& logprob, bool of_prompt);
  void finish(GenerationResult result);
  void fail(std::string message);

 private:
  GenerationRequest request_;
  const Clock::time_point deadline_, arrived_;
  std::atomic<bool> cancelled_{false};

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  State state_ = State::Queued;
  Update pending_;  // not yet taken by wait()
  GenerationResult result_;
  std::optional<ApiError> error_;
  double first_token_seconds_ = -1;
};

}  // namespace megaqwen::server

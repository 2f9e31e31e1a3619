// Metrics: the server's counters, exposed at GET /metrics in Prometheus' text format (version 0.0.4).
// Requests by endpoint and status; prompt, cached and generated tokens; a time-to-first-token
// histogram (from arrival, so queueing counts); decode speed of the last generation. Thread-safe.
#pragma once

#include <array>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "megaqwen/engine/prompt_cache.h"

namespace megaqwen::server {

class Metrics {
 public:
  // Upper bounds of the time-to-first-token histogram buckets, in seconds.
  static constexpr std::array<double, 12> kTtftBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                          0.5,   1.0,  2.5,   5.0,  10.0, 30.0};

  void record_request(const std::string& endpoint, int status);
  struct Generation {
    int prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
    double first_token_seconds = -1;  // from arrival; < 0 when no token came
    double decode_seconds = 0;
    bool cancelled = false;  // the client went away or the request timed out
  };
  void record_generation(const Generation& g);

  // The exposition text; queue depth and running requests are read by the caller at scrape time.
  std::string render(size_t queue_depth, size_t running, const PromptCacheStats& prompt_cache = {}) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, long long> requests_;
  long long prompt_tokens_ = 0, cached_tokens_ = 0, generated_tokens_ = 0, generations_ = 0, cancelled_ = 0;
  std::array<long long, kTtftBuckets.size()> ttft_counts_{};  // per bucket, not cumulative
  long long ttft_count_ = 0;
  double ttft_sum_ = 0;
  double decode_seconds_total_ = 0;
  double last_decode_tokens_per_second_ = 0;
};

}  // namespace megaqwen::server

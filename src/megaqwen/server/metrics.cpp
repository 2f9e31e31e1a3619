#include "megaqwen/server/metrics.h"

#include <array>

#include <fmt/format.h>

namespace megaqwen::server {

void Metrics::record_request(const std::string& endpoint, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
}

void Metrics::record_generation(const Generation& g) {
  std::lock_guard lock(mutex_);
  ++generations_;
  if (g.cancelled) ++cancelled_;
  prompt_tokens_ += g.prompt_tokens;
  cached_tokens_ += g.cached_tokens;
  generated_tokens_ += g.generated_tokens;
  decode_seconds_total_ += g.decode_seconds;
  if (g.generated_tokens > 1 && g.decode_seconds > 0)
    last_decode_tokens_per_second_ = (g.generated_tokens - 1) / g.decode_seconds;
  if (g.first_token_seconds >= 0) {
    ++ttft_count_;
    ttft_sum_ += g.first_token_seconds;
    for (size_t i = 0; i < kTtftBuckets.size(); ++i)
      if (g.first_token_seconds <= kTtftBuckets[i]) {
        ++ttft_counts_[i];
        break;
      }
  }
}

std::string Metrics::render(size_t queue_depth, size_t running, const PromptCacheStats& prompt_cache) const {
  std::lock_guard lock(mutex_);
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  family("megaqwen_requests_total", "counter", "HTTP requests by endpoint and status code.");
  for (const auto& [key, count] : requests_)
    out += fmt::format("megaqwen_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, count);
  auto n = [](auto v) { return fmt::format("{}", v); };
  const PromptCacheStats& pc = prompt_cache;
  // The unlabelled samples: name, type, help, value (formatted).
  const std::array<std::array<std::string, 4>, 20> singles = {{
      {"megaqwen_generations_total", "counter", "Generations run on the engine.", n(generations_)},
      {"megaqwen_generations_cancelled_total", "counter", "Generations stopped by a client disconnect or timeout.",
       n(cancelled_)},
      {"megaqwen_prompt_tokens_total", "counter", "Prompt tokens of all generations.", n(prompt_tokens_)},
      {"megaqwen_cached_prompt_tokens_total", "counter", "Prompt tokens reused from the KV cache (not prefilled).",
       n(cached_tokens_)},
      {"megaqwen_generated_tokens_total", "counter", "Generated tokens.", n(generated_tokens_)},
      {"megaqwen_decode_seconds_total", "counter", "Seconds spent decoding.",
       fmt::format("{:.6f}", decode_seconds_total_)},
      {"megaqwen_decode_tokens_per_second", "gauge", "Decode speed of the last generation.",
       fmt::format("{:.3f}", last_decode_tokens_per_second_)},
      {"megaqwen_queue_depth", "gauge", "Requests waiting for the engine.", n(queue_depth)},
      {"megaqwen_requests_running", "gauge", "Requests being generated (0 or 1: one sequence at a time).", n(running)},
      {"megaqwen_prompt_cache_entries", "gauge", "Conversations set aside in the prompt cache.", n(pc.entries)},
      {"megaqwen_prompt_cache_saves_total", "counter", "Sequences copied out of the engine into the prompt cache.",
       n(pc.saves)},
      {"megaqwen_prompt_cache_restores_total", "counter", "Sequences put back into the engine from the cache.",
       n(pc.restores)},
      {"megaqwen_prompt_cache_restored_tokens_total", "counter", "Prompt tokens the restored sequences provided.",
       n(pc.restored_tokens)},
      {"megaqwen_prompt_cache_evictions_total", "counter", "Sequences dropped to stay within the budget.",
       n(pc.evictions)},
      {"megaqwen_prompt_cache_skipped_total", "counter", "Saves left out because too little memory was free.",
       n(pc.skipped_for_memory)},
      {"megaqwen_prompt_cache_errors_total", "counter", "Saves or restores that failed (the request went on).",
       n(pc.errors)},
      {"megaqwen_prompt_cache_budget_bytes", "gauge", "The prompt cache's memory budget (--cache-ram / --cache-vram).",
       n(pc.budget_bytes)},
      {"megaqwen_prompt_cache_disk_entries", "gauge", "Conversations stored in the prompt cache folder (--cache-dir).",
       n(pc.disk_entries)},
      {"megaqwen_prompt_cache_disk_writes_total", "counter", "Sequences written to the prompt cache folder.",
       n(pc.disk_writes)},
      {"megaqwen_prompt_cache_disk_restores_total", "counter", "Sequences read back from the prompt cache folder.",
       n(pc.disk_restores)},
  }};
  for (const auto& [name, type, help, value] : singles) {
    family(name.c_str(), type.c_str(), help.c_str());
    out += fmt::format("{} {}\n", name, value);
  }
  family("megaqwen_prompt_cache_bytes", "gauge",
         "Memory held by the prompt cache (host for CPU engines, device for CUDA ones; disk: its folder).");
  out += fmt::format("megaqwen_prompt_cache_bytes{{memory=\"{}\"}} {}\n", state_memory_name(pc.memory), pc.bytes);
  out += fmt::format("megaqwen_prompt_cache_bytes{{memory=\"disk\"}} {}\n", pc.disk_bytes);
  family("megaqwen_time_to_first_token_seconds", "histogram", "Arrival to first generated token.");
  long long cumulative = 0;
  for (size_t i = 0; i < kTtftBuckets.size(); ++i) {
    cumulative += ttft_counts_[i];
    out += fmt::format("megaqwen_time_to_first_token_seconds_bucket{{le=\"{}\"}} {}\n", kTtftBuckets[i], cumulative);
  }
  out += fmt::format("megaqwen_time_to_first_token_seconds_bucket{{le=\"+Inf\"}} {}\n", ttft_count_);
  out += fmt::format("megaqwen_time_to_first_token_seconds_sum {:.6f}\n", ttft_sum_);
  out += fmt::format("megaqwen_time_to_first_token_seconds_count {}\n", ttft_count_);
  return out;
}

}  // namespace megaqwen::server

#include "megaqwen/engine/scoring.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>

#include "megaqwen/sampling/logprobs.h"
#include "megaqwen/util/error.h"

namespace megaqwen {

void prefill_scored(Engine& engine, std::span<const int32_t> tokens,
                    const std::function<void(size_t, std::span<const float>)>& on_row) {
  const size_t V = size_t(engine.config().vocab_size);
  // Rows of logits held at once: ~64 MiB (110 rows at Qwen3's 151,936 vocabulary).
  const size_t block = std::max<size_t>(1, (size_t(64) << 20) / (V * sizeof(float)));
  std::vector<float> rows;
  for (size_t begin = 0; begin < tokens.size(); begin += block) {
    const size_t n = std::min(block, tokens.size() - begin);
    engine.prefill_all_logits(tokens.subspan(begin, n), rows);
    for (size_t r = 0; r < n; ++r) on_row(begin + r, std::span<const float>(rows.data() + r * V, V));
  }
}

int perplexity_windows(const Engine& engine, size_t tokens, const PerplexityOptions& o) {
  if (o.window < 4) fail("the perplexity window must be at least 4 tokens, got {}", o.window);
  if (o.window > engine.context_size())
    fail("the perplexity window of {} tokens exceeds the context of {}", o.window, engine.context_size());
  if (o.max_windows < 0) fail("the number of windows must be >= 0, got {}", o.max_windows);
  const size_t whole = tokens / size_t(o.window);
  if (whole == 0)
    fail("the text has {} tokens, fewer than one window of {}; give more text or a smaller window", tokens, o.window);
  return o.max_windows > 0 ? int(std::min(whole, size_t(o.max_windows))) : int(std::min<size_t>(whole, INT32_MAX));
}

PerplexityReport perplexity(Engine& engine, std::span<const int32_t> tokens, const PerplexityOptions& o,
                            const std::function<void(int, const PerplexityReport&)>& on_window) {
  const int windows = perplexity_windows(engine, tokens.size(), o);
  PerplexityReport report;
  report.window = o.window;
  const auto start = std::chrono::steady_clock::now();
  const size_t first = size_t(o.window / 2);
  double sum = 0, sum_sq = 0;  // of per-token NLL, for the mean and its standard error
  for (int k = 0; k < windows; ++k) {
    const auto window_start = std::chrono::steady_clock::now();
    const std::span<const int32_t> w = tokens.subspan(size_t(k) * size_t(o.window), size_t(o.window));
    engine.truncate(0);
    PerplexityWindow pw;
    prefill_scored(engine, w, [&](size_t i, std::span<const float> logits) {
      if (i < first || i + 1 >= w.size()) return;
      const double nll = -double(token_logprob(logits, w[i + 1], 0).logprob);
      pw.nll_sum += nll;
      ++pw.scored;
      sum += nll;
      sum_sq += nll * nll;
    });
    pw.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start).count();
    report.per_window.push_back(pw);
    report.windows = k + 1;
    report.scored_tokens += pw.scored;
    const double n = double(report.scored_tokens);
    report.mean_nll = sum / n;
    const double variance = n > 1 ? std::max(0.0, (sum_sq - n * report.mean_nll * report.mean_nll) / (n - 1)) : 0.0;
    report.nll_stderr = std::sqrt(variance / n);
    report.perplexity = std::exp(report.mean_nll);
    report.perplexity_stderr = report.perplexity * report.nll_stderr;
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (on_window) on_window(k, report);
  }
  engine.truncate(0);
  return report;
}

}  // namespace megaqwen

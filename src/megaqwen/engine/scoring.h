// Scoring text with a model: the logits of every position of a token sequence, a block at a time,
// and perplexity as llama.cpp's llama-perplexity measures it (so numbers compare across engines).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "megaqwen/engine/engine.h"

namespace megaqwen {

// Prefills `tokens` after what the engine's cache holds, in blocks of prefill_all_logits rows (about
// 64 MiB of logits each, so a long text never holds [tokens, vocab] floats at once), calling
// on_row(i, logits) with the logits after tokens[i], in order.
void prefill_scored(Engine& engine, std::span<const int32_t> tokens,
                    const std::function<void(size_t, std::span<const float>)>& on_row);

struct PerplexityOptions {
  int window = 512;     // tokens per window (llama.cpp's n_ctx); each starts from an empty cache
  int max_windows = 0;  // 0: as many whole windows as the text holds
};

struct PerplexityWindow {
  double nll_sum = 0;  // summed negative log-likelihood of its scored tokens (natural log)
  int scored = 0;
  double seconds = 0;
};

struct PerplexityReport {
  int window = 0, windows = 0;
  int64_t scored_tokens = 0;
  double mean_nll = 0, nll_stderr = 0;  // per scored token, and the standard error of that mean
  double perplexity = 0;                // exp(mean_nll)
  double perplexity_stderr = 0;         // perplexity * nll_stderr (first-order)
  double seconds = 0;
  std::vector<PerplexityWindow> per_window;
};

// How many windows perplexity() scores for a text of `tokens` tokens; throws Error as it does.
int perplexity_windows(const Engine& engine, size_t tokens, const PerplexityOptions& options);

// Cuts `tokens` into consecutive windows of options.window tokens (a tail shorter than a window is
// left out). Each window is evaluated from an empty cache and scores the predictions of its second
// half (positions window/2 .. window-1): every scored token has at least window/2 tokens of context.
// on_window(k, report so far) after each window (progress). Throws Error when the text holds no
// whole window, or the window is under 4 tokens or over the engine's context.
PerplexityReport perplexity(Engine& engine, std::span<const int32_t> tokens, const PerplexityOptions& options,
                            const std::function<void(int, const PerplexityReport&)>& on_window = {});

}  // namespace megaqwen

// Log-probabilities of tokens under the model's own distribution: log_softmax of the raw logits,
// before any penalty, temperature or filter (what vLLM reports by default). They score text
// (a prompt's tokens, an evaluation's continuation) and show how sure the model was of each token
// it produced; the tokens themselves may have been drawn with other sampling settings.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace megaqwen {

// Most likely alternatives at a position: highest log-probability first, lowest id on ties.
inline constexpr int kMaxTopLogprobs = 20;

struct TopLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct TokenLogprob {
  int32_t token = 0;        // the token actually at this position
  float logprob = 0.0f;     // its log-probability (<= 0)
  std::vector<TopLogprob> top;  // the `top` most likely tokens of the position
};

// log_softmax(logits)[token] and the `top` (0 .. kMaxTopLogprobs) most likely tokens, in double
// precision. Throws Error when token is out of range or top is outside 0 .. kMaxTopLogprobs.
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int top);

}  // namespace megaqwen

#include "megaqwen/sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "megaqwen/util/error.h"

namespace megaqwen {

TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int top) {
  if (logits.empty()) fail("logprobs of an empty vocabulary");
  if (token < 0 || size_t(token) >= logits.size())
    fail("token id {} is outside the vocabulary of {}", token, logits.size());
  if (top < 0 || top > kMaxTopLogprobs) fail("top logprobs must be 0 .. {}, got {}", kMaxTopLogprobs, top);

  // log Z = max + log(sum exp(x - max)): no overflow whatever the logits' scale.
  float max = -std::numeric_limits<float>::infinity();
  for (float x : logits) max = std::max(max, x);
  double sum = 0.0;
  for (float x : logits) sum += std::exp(double(x) - double(max));
  const double log_z = double(max) + std::log(sum);

  TokenLogprob out;
  out.token = token;
  out.logprob = float(double(logits[size_t(token)]) - log_z);

  // The `top` best in one pass: a small list kept sorted (best first, lower id first on ties, which
  // the scan order gives for free: a later id only enters on a strictly larger logit).
  std::vector<int32_t> best;
  best.reserve(size_t(top) + 1);
  for (size_t i = 0; i < logits.size() && top > 0; ++i) {
    const float x = logits[i];
    if (best.size() == size_t(top) && !(x > logits[size_t(best.back())])) continue;
    auto at = std::upper_bound(best.begin(), best.end(), x, [&](float v, int32_t id) { return v > logits[size_t(id)]; });
    best.insert(at, int32_t(i));
    if (best.size() > size_t(top)) best.pop_back();
  }
  for (int32_t id : best) out.top.push_back({id, float(double(logits[size_t(id)]) - log_z)});
  return out;
}

}  // namespace megaqwen

#include "megaqwen/grammar/token_mask.h"

#include <algorithm>
#include <cmath>

namespace megaqwen {

bool mask_logits(const TokenBits& bits, int32_t extra, std::span<float> logits) {
  bool any = false;
  // A word at a time: most words of a mask are all ones or all zeros.
  for (size_t w = 0; w * 64 < logits.size(); ++w) {
    uint64_t word = w < bits.size() ? bits[w] : 0;
    if (extra >= 0 && size_t(extra) / 64 == w) word |= uint64_t(1) << (extra % 64);
    float* x = logits.data() + w * 64;
    const size_t n = std::min<size_t>(64, logits.size() - w * 64);
    if (word == 0) {
      std::fill(x, x + n, -INFINITY);
      continue;
    }
    if (word == ~uint64_t(0) && any) continue;
    for (size_t i = 0; i < n; ++i) {
      if (word >> i & 1)
        any = any || x[i] > -INFINITY;
      else
        x[i] = -INFINITY;
    }
  }
  return any;
}

}  // namespace megaqwen

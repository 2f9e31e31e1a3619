// exp for x <= 0 in plain arithmetic the compiler vectorizes (a call to expf stops the loop around it
// from vectorizing; prefill attention takes ~100 million of them per layer at a 2k context).
// Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, and Cephes' degree-7 polynomial for e^r: within
// 2 ulp of the exact value over [-87, 0] (tests/engine/cpu_exp_test.cpp sweeps it: 0.99 at worst,
// with and without fused multiply-adds). Below -87, where 2^n would leave the normal range, it
// returns 0 (expf gives at most 1.6e-38 there, which no sum of softmax weights that includes 1 can
// notice).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace megaqwen::cpu {

inline float exp_nonpositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // kLn2Hi has 9 significant bits
  // Clamped first (NaN and -inf too: the comparison is false for them), so the conversion of n to an
  // integer below is always defined; the result is chosen on the unclamped x.
  const float xc = std::max(-87.5f, x);
  const float n = std::floor(xc * kLog2e + 0.5f);
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x >= -87.0f ? p * two_n : 0.0f;
}

}  // namespace megaqwen::cpu

// cpu::exp_nonpositive (cpu_exp.h), prefill attention's vectorizable exp, against exp in double
// precision over its whole range: every 97th float of [-87, 0] (~11 million values, every binade
// and the rounding boundaries of its reduction alike), then the edges. Twice: as baseline x86-64
// compiles it (separate multiplies and adds), and with fused multiply-adds, as the AVX2 and AVX-512
// clones of the attention's softmax run it (this file is built with -ffp-contract=fast, as
// cpu_attention.cpp is).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

#include "megaqwen/engine/cpu_exp.h"

namespace megaqwen {
namespace {

using Exp = float (*)(float);

float exp_plain(float x) { return cpu::exp_nonpositive(x); }
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) float exp_fused(float x) { return cpu::exp_nonpositive(x); }
bool have_fma() { return __builtin_cpu_supports("fma"); }
#else
float exp_fused(float x) { return cpu::exp_nonpositive(x); }
bool have_fma() { return true; }
#endif

// Distance in units in the last place of the float nearest to `exact`.
double ulps(float got, double exact) {
  const float nearest = static_cast<float>(exact);
  const double ulp = double(std::nextafter(nearest, std::numeric_limits<float>::infinity())) - double(nearest);
  return std::fabs(double(got) - exact) / ulp;
}

void expect_within_two_ulps(Exp exp_under_test) {
  const uint32_t zero = std::bit_cast<uint32_t>(-0.0f), lowest = std::bit_cast<uint32_t>(-87.0f);
  double worst = 0;
  float worst_x = 0;
  int64_t checked = 0;
  // Negative floats grow in magnitude with their bit pattern: -0.0 .. -87.0.
  for (uint32_t bits = zero; bits <= lowest; bits += 97, ++checked) {
    const float x = std::bit_cast<float>(bits);
    const double e = ulps(exp_under_test(x), std::exp(double(x)));
    if (e > worst) worst = e, worst_x = x;
  }
  EXPECT_GT(checked, 10'000'000);
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
  std::printf("worst: %.3f ulps at x = %.9g\n", worst, double(worst_x));
}

TEST(CpuExp, WithinTwoUlpsOverTheRange) { expect_within_two_ulps(&exp_plain); }

TEST(CpuExp, WithinTwoUlpsOverTheRangeWithFusedMultiplyAdds) {
  if (!have_fma()) GTEST_SKIP() << "this processor has no FMA";
  expect_within_two_ulps(&exp_fused);
}

TEST(CpuExp, Edges) {
  for (Exp e : {&exp_plain, &exp_fused}) {
    if (e == &exp_fused && !have_fma()) continue;
    EXPECT_EQ(e(0.0f), 1.0f);
    EXPECT_EQ(e(-0.0f), 1.0f);
    EXPECT_LE(ulps(e(-87.0f), std::exp(-87.0)), 2.0);
    // Below -87 the result is 0, as are -inf and NaN (masked softmax lanes compute -inf - -inf).
    EXPECT_EQ(e(-87.5f), 0.0f);
    EXPECT_EQ(e(-1e30f), 0.0f);
    EXPECT_EQ(e(-std::numeric_limits<float>::infinity()), 0.0f);
    EXPECT_EQ(e(std::numeric_limits<float>::quiet_NaN()), 0.0f);
  }
}

}  // namespace
}  // namespace megaqwen

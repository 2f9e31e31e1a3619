// cpu::causal_attention (cpu_attention.cpp) against a double-precision softmax(q K^T * scale) V, on
// both of its paths (below 8 new tokens: runs of 128 cached positions whose partial softmaxes are
// merged; from 8: 32-query blocks on the matmul kernel), at every SIMD level this processor has: head
// sizes that are and are not multiples of the 32-wide panel, GQA groups of 1, 2 and 4, caches that
// already hold earlier positions, and outputs poisoned with NaN. A token must also get what it gets
// in another call or on another thread count, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/engine/cpu_simd.h"
#include "megaqwen/util/thread_pool.h"

namespace megaqwen {
namespace {

using cpu::SimdLevel;

struct Case {
  int64_t tokens, heads, kv_heads, D, first_position;
};

struct Inputs {
  std::vector<float> q, k_cache, v_cache;  // q [tokens, heads, D]; caches [positions, kv_heads, D]
};

Inputs random_inputs(const Case& c, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Inputs in;
  const int64_t positions = c.first_position + c.tokens;
  in.q.resize(size_t(c.tokens * c.heads * c.D));
  in.k_cache.resize(size_t(positions * c.kv_heads * c.D));
  in.v_cache.resize(in.k_cache.size());
  for (float& x : in.q) x = normal(rng) * 2.0f;  // sharp enough that the softmax is not flat
  for (float& x : in.k_cache) x = normal(rng);
  for (float& x : in.v_cache) x = normal(rng);
  return in;
}

std::vector<float> run(const Case& c, const Inputs& in, ThreadPool& pool) {
  std::vector<float> out(in.q.size(), std::numeric_limits<float>::quiet_NaN());
  cpu::causal_attention(in.q.data(), c.tokens, c.heads, c.kv_heads, c.D, c.first_position, in.k_cache.data(),
                        in.v_cache.data(), 1.0f / std::sqrt(float(c.D)), out.data(), pool);
  return out;
}

// Within 2e-5 of the exact output, relative to the largest |v| (the output is a weighted mean of
// values). Dropping one position's weight, or attending one position too far, errs by far more.
void expect_close(const Case& c, const Inputs& in, const std::vector<float>& out, const std::string& what) {
  const int64_t group = c.heads / c.kv_heads, row = c.kv_heads * c.D;
  double v_max = 0;
  for (float v : in.v_cache) v_max = std::max(v_max, double(std::fabs(v)));
  int failures = 0;
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t g = h / group, n = c.first_position + t + 1;
      const float* qh = &in.q[size_t((t * c.heads + h) * c.D)];
      std::vector<double> w(static_cast<size_t>(n));
      double max_score = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t d = 0; d < c.D; ++d) s += double(qh[d]) * in.k_cache[size_t(j * row + g * c.D + d)];
        w[size_t(j)] = s / std::sqrt(double(c.D));
        max_score = std::max(max_score, w[size_t(j)]);
      }
      for (double& x : w) sum += (x = std::exp(x - max_score));
      for (int64_t d = 0; d < c.D; ++d) {
        double exact = 0;
        for (int64_t j = 0; j < n; ++j) exact += w[size_t(j)] / sum * in.v_cache[size_t(j * row + g * c.D + d)];
        const float got = out[size_t((t * c.heads + h) * c.D + d)];
        if (!(std::fabs(got - exact) <= 2e-5 * v_max) && ++failures <= 5)
          ADD_FAILURE() << what << ": out[" << t << ", " << h << ", " << d << "] = " << got << ", exact " << exact;
      }
    }
}

std::string name(const Case& c) {
  return "tokens " + std::to_string(c.tokens) + " heads " + std::to_string(c.heads) + "/" +
         std::to_string(c.kv_heads) + " D " + std::to_string(c.D) + " from " + std::to_string(c.first_position);
}

TEST(CpuAttention, MatchesExactSoftmaxOnBothPathsAtEveryLevel) {
  ThreadPool pool(2);
  std::mt19937 rng(5);
  const std::vector<Case> cases = {
      {1, 4, 2, 16, 0},   {1, 4, 4, 128, 300}, {5, 8, 2, 48, 17},  {7, 2, 1, 32, 0},   {8, 2, 1, 32, 0},
      {9, 4, 2, 16, 3},   {33, 4, 1, 48, 0},   {40, 6, 3, 128, 70}, {65, 2, 2, 8, 260}, {100, 4, 2, 64, 0},
      // Below 8 tokens the cache is split into runs of 128 positions merged afterwards: a token whose
      // positions end exactly at a run's end, the next one starting a run, and Qwen3-0.6B's heads
      // over 8 runs; head sizes that leave a tail after the 16-lane dot products (40) or are all tail
      // (8); Qwen3.5's attention heads (256).
      {6, 8, 2, 64, 127}, {3, 16, 8, 128, 1000}, {4, 4, 2, 40, 200}, {1, 2, 1, 8, 130}, {2, 8, 2, 256, 300},
      // A blocked prompt whose queries see far more cached keys than their own block.
      {64, 4, 2, 256, 500},
  };
  for (SimdLevel level : {SimdLevel::kGeneric, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (level > cpu::detected_simd_level()) continue;
    cpu::set_simd_level(level);
    for (const Case& c : cases) {
      const Inputs in = random_inputs(c, rng);
      expect_close(c, in, run(c, in, pool), std::string(cpu::simd_level_name(level)) + " " + name(c));
    }
  }
  cpu::set_simd_level(cpu::detected_simd_level());
}

// `whole` run on 1 and on 3 threads, and as its first `first_call` tokens then the rest in a second
// call (starting from the cache the first left), gives the same outputs bit for bit.
void expect_independent_of_threads_and_calls(const Case& whole, int64_t first_call, uint32_t seed) {
  ThreadPool one(1), three(3);
  std::mt19937 rng(seed);
  const Inputs in = random_inputs(whole, rng);
  const std::vector<float> a = run(whole, in, one), b = run(whole, in, three);
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << name(whole) << ": 1 or 3 threads";

  const size_t head_floats = size_t(first_call * whole.heads * whole.D);
  Case head = whole, tail = whole;
  head.tokens = first_call;
  tail.tokens = whole.tokens - first_call;
  tail.first_position = whole.first_position + first_call;
  Inputs head_in = in, tail_in = in;
  head_in.q.resize(head_floats);
  tail_in.q.erase(tail_in.q.begin(), tail_in.q.begin() + ptrdiff_t(head_floats));
  const std::vector<float> c = run(head, head_in, three), d = run(tail, tail_in, one);
  ASSERT_EQ(std::memcmp(c.data(), a.data(), c.size() * sizeof(float)), 0) << name(head);
  ASSERT_EQ(std::memcmp(d.data(), a.data() + head_floats, d.size() * sizeof(float)), 0) << name(tail);
}

// The prompt path: 70 tokens after 10 cached, as 20 + 50.
TEST(CpuAttention, BlockedTokensDoNotDependOnTheirNeighbours) {
  expect_independent_of_threads_and_calls({70, 4, 2, 64, 10}, 20, 9);
}

// The decode path: 5 tokens over 700 cached positions (6 runs each), as 2 + 3.
TEST(CpuAttention, SplitTokensDoNotDependOnThreadsOrCalls) {
  expect_independent_of_threads_and_calls({5, 8, 4, 128, 700}, 2, 11);
}

}  // namespace
}  // namespace megaqwen

// cpu::causal_conv and cpu::delta_rule (cpu_gated_delta_net.cpp) against double-precision versions of
// the formulas in their header, on random inputs at the test models' head shapes, odd sizes that are
// not multiples of a vector, and Qwen3.5-0.8B's (16 heads of 128 x 128). Also: a prompt run in chunks
// carries its state so that every token gets what it gets in one call, bit for bit, and the thread
// count does not change a bit.
//
// Threshold 1e-5 of the largest reference value: fp32 sums of at most 128 products carry ~1e-7
// relative error per step, a few steps deep; a wrong key head, decay order or tap moves values by 1e-1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "megaqwen/engine/cpu_gated_delta_net.h"
#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/util/bf16.h"
#include "megaqwen/util/thread_pool.h"
#include "test_random.h"

namespace megaqwen {
namespace {

using test::random_floats;

constexpr double kTolerance = 1e-5;

// max |got - want| / max |want|.
double rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    err = std::max(err, std::abs(double(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return std::isfinite(err) ? err / std::max(scale, 1e-30) : INFINITY;
}

TEST(CpuCausalConv, MatchesTheDefinitionAcrossChunks) {
  ThreadPool pool(2);
  for (int64_t K : {1, 2, 4}) {
    for (int64_t C : {1, 40, 3 * 128 + 5, 6144}) {
      SCOPED_TRACE(testing::Message() << "K " << K << ", C " << C);
      std::vector<uint16_t> taps(static_cast<size_t>(C * K));
      const auto tap_values = random_floats(taps.size(), 7 + uint64_t(C * K), -1, 1);
      for (size_t i = 0; i < taps.size(); ++i) taps[i] = f32_to_bf16(tap_values[i]);
      const WeightMatrix conv{reinterpret_cast<const uint8_t*>(taps.data()), DType::BF16, C, K};
      const auto initial = random_floats(static_cast<size_t>((K - 1) * C), 11, -2, 2);
      const int64_t T = 13;
      const auto input = random_floats(static_cast<size_t>(T * C), 12, -3, 3);

      // The definition, in double, over the remembered inputs followed by this prompt's.
      std::vector<double> want(input.size());
      for (int64_t t = 0; t < T; ++t)
        for (int64_t ch = 0; ch < C; ++ch) {
          double acc = 0;
          for (int64_t j = 0; j < K; ++j) {
            const int64_t at = t - (K - 1) + j;  // negative: from the state
            const double x = at < 0 ? initial[size_t((K - 1 + at) * C + ch)] : input[size_t(at * C + ch)];
            acc += double(bf16_to_f32(taps[size_t(ch * K + j)])) * x;
          }
          want[size_t(t * C + ch)] = acc / (1.0 + std::exp(-acc));
        }

      std::vector<float> state = initial, whole = input;
      cpu::causal_conv(conv, state.data(), whole.data(), T, pool);
      EXPECT_LE(rel_error(whole, want), kTolerance);
      // The state keeps the last K-1 inputs.
      for (int64_t i = 0; i < (K - 1) * C; ++i)
        ASSERT_EQ(state[size_t(i)], input[size_t((T - (K - 1)) * C + i)]) << "state " << i;

      // 1 + 5 + 7 tokens on one thread: the same outputs bit for bit.
      ThreadPool one(1);
      std::vector<float> chunked_state = initial, chunked = input;
      int64_t t0 = 0;
      for (int64_t n : {1, 5, 7}) {
        cpu::causal_conv(conv, chunked_state.data(), chunked.data() + t0 * C, n, one);
        t0 += n;
      }
      EXPECT_EQ(chunked, whole);
      EXPECT_EQ(chunked_state, state);
    }
  }
}

struct Shape {
  int64_t nk, nv, dk, dv;
};

// The four steps of the header, in double, over states [nv, dk, dv].
std::vector<double> delta_rule_reference(const Shape& s, std::vector<double>& S, const std::vector<float>& qkv,
                                         const std::vector<float>& beta, const std::vector<float>& g, int64_t T) {
  const int64_t Kd = s.nk * s.dk, C = 2 * Kd + s.nv * s.dv;
  std::vector<double> o(static_cast<size_t>(T * s.nv * s.dv)), m(static_cast<size_t>(s.dv));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t hv = 0; hv < s.nv; ++hv) {
      const int64_t hk = hv / (s.nv / s.nk), at = t * s.nv + hv;
      const float* q = qkv.data() + t * C + hk * s.dk;
      const float* k = qkv.data() + t * C + Kd + hk * s.dk;
      const float* v = qkv.data() + t * C + 2 * Kd + hv * s.dv;
      double* state = S.data() + hv * s.dk * s.dv;
      const double alpha = std::exp(double(g[size_t(at)]));
      for (int64_t i = 0; i < s.dk * s.dv; ++i) state[i] *= alpha;
      std::fill(m.begin(), m.end(), 0.0);
      for (int64_t i = 0; i < s.dk; ++i)
        for (int64_t j = 0; j < s.dv; ++j) m[size_t(j)] += state[i * s.dv + j] * k[i];
      for (int64_t i = 0; i < s.dk; ++i)
        for (int64_t j = 0; j < s.dv; ++j) state[i * s.dv + j] += k[i] * beta[size_t(at)] * (v[j] - m[size_t(j)]);
      for (int64_t j = 0; j < s.dv; ++j) {
        double acc = 0;
        for (int64_t i = 0; i < s.dk; ++i) acc += state[i * s.dv + j] * q[i];
        o[size_t(at * s.dv + j)] = acc;
      }
    }
  return o;
}

TEST(CpuDeltaRule, MatchesTheDefinitionAcrossChunksAndThreads) {
  // The fixtures' shape, tiny-hybrid-gqa's (2 key heads, 4 value heads), odd sizes, and Qwen3.5-0.8B's.
  const Shape shapes[] = {{4, 4, 8, 16}, {2, 4, 16, 32}, {1, 3, 5, 7}, {1, 2, 64, 40}, {16, 16, 128, 128}};
  for (const Shape& s : shapes) {
    SCOPED_TRACE(testing::Message() << "nk " << s.nk << ", nv " << s.nv << ", dk " << s.dk << ", dv " << s.dv);
    const cpu::DeltaNetShape shape{s.nk, s.nv, s.dk, s.dv};
    const int64_t T = 9, C = shape.conv_dim();
    const size_t state_size = static_cast<size_t>(s.nv * s.dk * s.dv);
    const auto initial = random_floats(state_size, 21, -0.5f, 0.5f);
    // Gated inputs as delta_net_gates leaves them: q and k unit length (q then scaled), beta in (0, 1),
    // g < 0.
    auto qkv = random_floats(static_cast<size_t>(T * C), 22, -2, 2);
    const auto b = random_floats(static_cast<size_t>(T * s.nv), 23, -3, 3);
    const auto a = random_floats(static_cast<size_t>(T * s.nv), 24, -3, 3);
    const auto A_log = random_floats(static_cast<size_t>(s.nv), 25, -1, 1);
    const auto dt_bias = random_floats(static_cast<size_t>(s.nv), 26, -1, 1);
    std::vector<float> beta(b.size()), g(b.size());
    cpu::delta_net_gates(shape, WeightVector{reinterpret_cast<const uint8_t*>(A_log.data()), DType::F32, s.nv},
                         WeightVector{reinterpret_cast<const uint8_t*>(dt_bias.data()), DType::F32, s.nv}, qkv.data(),
                         b.data(), a.data(), T, beta.data(), g.data());

    std::vector<double> S_want(initial.begin(), initial.end());
    const auto want = delta_rule_reference(s, S_want, qkv, beta, g, T);

    ThreadPool pool(2);
    std::vector<float> states = initial, o(want.size(), NAN);
    cpu::delta_rule(shape, states.data(), qkv.data(), beta.data(), g.data(), T, o.data(), pool);
    EXPECT_LE(rel_error(o, want), kTolerance) << "outputs";
    EXPECT_LE(rel_error(states, S_want), kTolerance) << "states";

    // 4 + 1 + 4 tokens on three threads: the same outputs and states, bit for bit.
    ThreadPool three(3);
    std::vector<float> chunked_states = initial, chunked(want.size(), NAN);
    int64_t t0 = 0;
    for (int64_t n : {4, 1, 4}) {
      cpu::delta_rule(shape, chunked_states.data(), qkv.data() + t0 * C, beta.data() + t0 * s.nv, g.data() + t0 * s.nv,
                      n, chunked.data() + t0 * s.nv * s.dv, three);
      t0 += n;
    }
    EXPECT_EQ(chunked, o);
    EXPECT_EQ(chunked_states, states);
  }
}

}  // namespace
}  // namespace megaqwen

// The Gated DeltaNet kernels (kernels/gated_delta_net.cuh, gated_delta_net_chunked.cuh) against the CPU reference's own steps
// (cpu_gated_delta_net.h, which CpuHybridEngine runs and the transformers parity tests hold) on fresh
// random inputs, outputs poisoned with NaN first. Chunks run back to back (1 token, then 7, then 1),
// so the conv and recurrent states carried between calls are checked too, at the tiny test models'
// head shapes and at Qwen3.5-0.8B's (16 heads of 128 x 128).
//
// Threshold: fp32 on both sides; the norms sum in fp32 on the GPU and fp64 on the CPU, and expf /
// log1pf differ from glibc's by an ulp or two: ~1e-7 relative per step, a few steps deep. 1e-5
// (kernels_test.cpp's kFp32Tolerance) is far below any indexing or formula mistake (a wrong key head,
// decay order or norm moves values by 1e-1 or more).
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "megaqwen/cuda/kernels.h"
#include "megaqwen/engine/cpu_gated_delta_net.h"
#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/util/thread_pool.h"

namespace megaqwen {
namespace {

using namespace test;

constexpr double kTolerance = 1e-5;

struct Shape {
  int nk, nv, dk, dv;
};
// The fixtures' (4 heads of 8 x 16), tiny-hybrid's (2 of 32 x 32), tiny-hybrid-gqa's (2 key heads,
// 4 value heads of 16 x 32), an odd value size (dv 40: a partial warp of columns) and Qwen3.5-0.8B's.
const Shape kShapes[] = {{4, 4, 8, 16}, {2, 2, 32, 32}, {2, 4, 16, 32}, {1, 3, 64, 40}, {16, 16, 128, 128}};
const int kChunks[] = {1, 7, 1};

TEST(CudaGatedDeltaNet, CausalConvMatchesCpuAcrossChunks) {
  MQ_REQUIRE_GPU();
  ThreadPool pool(2);
  for (int K : {2, 4, 8}) {
    for (int C : {40, 128 * 3 + 5, 6144}) {
      SCOPED_TRACE(testing::Message() << "K " << K << ", C " << C);
      const auto taps = to_bf16(random_floats(size_t(C) * size_t(K), 300 + uint64_t(C) + uint64_t(K)));
      const WeightMatrix conv{reinterpret_cast<const uint8_t*>(taps.data()), DType::BF16, C, K};
      std::vector<float> state = random_floats(size_t(K - 1) * size_t(C), 400 + uint64_t(K), -2, 2);
      auto dtaps = upload(taps);
      auto dstate = upload(state);
      uint64_t seed = 500;
      for (int T : kChunks) {
        const auto in = random_floats(size_t(T) * size_t(C), seed++, -3, 3);
        std::vector<float> want = in;
        cpu::causal_conv(conv, state.data(), want.data(), T, pool);
        auto dqkv = upload(in);
        cuda::causal_conv(dqkv.data(), dtaps.data(), dstate.data(), T, C, K, nullptr);
        EXPECT_LE(rel_error(download(dqkv), want), kTolerance) << "T " << T;
        EXPECT_EQ(download(dstate), state) << "the conv state after T " << T;  // copies of inputs: exact
      }
    }
  }
}

// Runs chunks of T tokens back to back from one random state through the CPU steps and through
// `run_gpu` (a delta rule launcher), checking the outputs, the states carried between calls, and
// that qkv stays read only. `a` (the decay's input) is drawn from [a_lo, a_hi).
template <typename RunGpu>
void check_delta_rule(const Shape& s, std::span<const int> chunks, float a_lo, float a_hi, uint64_t seed,
                      RunGpu run_gpu) {
  SCOPED_TRACE(testing::Message() << "nk " << s.nk << ", nv " << s.nv << ", dk " << s.dk << ", dv " << s.dv
                                  << ", a in [" << a_lo << ", " << a_hi << ")");
  ThreadPool pool(2);
  const cpu::DeltaNetShape shape{s.nk, s.nv, s.dk, s.dv};
  const size_t C = size_t(shape.conv_dim()), state_size = size_t(s.nv) * size_t(s.dk) * size_t(s.dv);
  const auto A_log = random_floats(size_t(s.nv), seed, -1, 1), dt_bias = random_floats(size_t(s.nv), seed + 1, -1, 1);
  std::vector<float> states = random_floats(state_size, seed + 2, -0.5f, 0.5f);
  auto dA = upload(A_log), ddt = upload(dt_bias), dstates = upload(states);
  seed += 3;
  for (int T : chunks) {
    const auto qkv = random_floats(size_t(T) * C, seed++, -2, 2);
    const auto b = random_floats(size_t(T) * size_t(s.nv), seed++, -3, 3);
    const auto a = random_floats(size_t(T) * size_t(s.nv), seed++, a_lo, a_hi);
    std::vector<float> normed = qkv, beta(b.size()), g(b.size()), want(size_t(T) * size_t(s.nv) * size_t(s.dv));
    cpu::delta_net_gates(shape, f32_vector(A_log), f32_vector(dt_bias), normed.data(), b.data(), a.data(), T,
                         beta.data(), g.data());
    cpu::delta_rule(shape, states.data(), normed.data(), beta.data(), g.data(), T, want.data(), pool);

    auto dqkv = upload(qkv), db = upload(b), da = upload(a);
    auto o = poisoned_f32(want.size());
    run_gpu(cuda::DeltaRuleArgs{dqkv.data(), db.data(), da.data(), dA.data(), ddt.data(), dstates.data(), o.data(), T,
                                s.nk, s.nv, s.dk, s.dv, float(cpu::kDeltaNetL2NormEps)});
    EXPECT_LE(rel_error(download(o), want), kTolerance) << "o, T " << T;
    EXPECT_LE(rel_error(download(dstates), states), kTolerance) << "states after T " << T;
    EXPECT_EQ(download(dqkv), qkv) << "qkv is read only";
  }
}

TEST(CudaGatedDeltaNet, DeltaRuleMatchesCpuAcrossChunks) {
  MQ_REQUIRE_GPU();
  for (const Shape& s : kShapes)
    check_delta_rule(s, kChunks, -3, 3, 11, [](const cuda::DeltaRuleArgs& a) { cuda::delta_rule(a, nullptr); });
}

// The chunked form (gated_delta_net_chunked.cuh) against the same CPU steps, on prompts that end
// inside a chunk, on one, and at one token (a chunk of 31 padded rows), the state carried between
// calls; the workspace poisoned with NaN before every call, so a padded row or a record the scan reads
// before the prepare kernel wrote it shows. Three decay regimes: the models' usual range, decays so
// strong that e^G underflows to 0 inside a chunk (exp(-50) per token), and almost none (a ~ 1).
// Measured against the CPU steps: <= 2.8e-6 relative on outputs, 1.2e-6 on states (the other
// summation order, and exp of a sum for a product of exps), so the sequential kernel's 1e-5 holds here
// too; a scan that forgets the state's decay at a chunk's end misses by 4.9 .. 9.3.
TEST(CudaGatedDeltaNet, ChunkedDeltaRuleMatchesCpuAcrossChunks) {
  MQ_REQUIRE_GPU();
  struct Decay {
    float a_lo, a_hi;
  };
  const Decay decays[] = {{-3, 3} /* usual */, {30, 50} /* vanishing */, {-30, -20} /* none */};
  const int chunks[] = {1, 45, 32, 70, 300};
  for (const Shape& s : kShapes)
    for (const Decay& d : decays)
      check_delta_rule(s, chunks, d.a_lo, d.a_hi, 21, [](const cuda::DeltaRuleArgs& a) {
        // Poisoned: a padded row or a record the scan reads before the prepare kernel wrote it shows.
        auto workspace = poisoned_f32(cuda::delta_rule_chunked_workspace_floats(a.T, a.nk, a.nv, a.dk, a.dv));
        cuda::delta_rule_chunked(a, workspace.data(), nullptr);
      });
}

TEST(CudaGatedDeltaNet, GatedRmsNormMatchesCpuInPlaceToo) {
  MQ_REQUIRE_GPU();
  for (int n : {16, 128, 200}) {
    const int rows = 6;
    const auto x = random_floats(size_t(rows * n), 700 + uint64_t(n), -3, 3);
    const auto z = random_floats(x.size(), 800 + uint64_t(n), -3, 3);
    const auto w = random_floats(size_t(n), 900 + uint64_t(n), 0.5f, 1.5f);
    std::vector<float> want(x.size());
    for (int r = 0; r < rows; ++r)
      cpu::gated_rms_norm(&x[size_t(r * n)], &z[size_t(r * n)], f32_vector(w), 1e-6, n, &want[size_t(r * n)]);
    auto dx = upload(x), dz = upload(z), dw = upload(w);
    auto out = poisoned_f32(x.size());
    cuda::gated_rms_norm(dx.data(), dz.data(), dw.data(), rows, n, 1e-6f, out.data(), nullptr);
    EXPECT_LE(rel_error(download(out), want), kTolerance) << "n " << n;
    cuda::gated_rms_norm(dx.data(), dz.data(), dw.data(), rows, n, 1e-6f, dx.data(), nullptr);
    EXPECT_LE(rel_error(download(dx), want), kTolerance) << "in place, n " << n;
  }
}

TEST(CudaGatedDeltaNet, UnsupportedShapesAreErrors) {
  MQ_REQUIRE_GPU();
  auto buf = poisoned_f32(64);
  auto taps = poisoned_bf16(64);
  EXPECT_THROW(cuda::causal_conv(buf.data(), taps.data(), buf.data(), 1, 8, 1, nullptr), std::exception);
  EXPECT_THROW(cuda::causal_conv(buf.data(), taps.data(), buf.data(), 1, 4, 9, nullptr), std::exception);
  cuda::DeltaRuleArgs a{buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                        1, 2, 3, 8, 8, 1e-6f};
  EXPECT_THROW(cuda::delta_rule(a, nullptr), std::exception);  // 3 value heads over 2 key heads
  a.nv = 2;
  a.dk = 256;
  EXPECT_THROW(cuda::delta_rule(a, nullptr), std::exception);  // dk beyond 128
  EXPECT_THROW(cuda::delta_rule_chunked(a, buf.data(), nullptr), std::exception);
  a.nv = 3;
  a.dk = 8;
  EXPECT_THROW(cuda::delta_rule_chunked(a, buf.data(), nullptr), std::exception);
}

}  // namespace
}  // namespace megaqwen

// The decode megakernel on Qwen3.5 hybrids (DeltaNet stages A' B' C' beside the gated-attention
// stages, src/megaqwen/cuda/megakernel) against the per-operator hybrid path and the CPU engine, on
// the two tiny hybrid presets: tiny-hybrid ([DeltaNet, attention], head_dim 64, rotary 16) and
// tiny-hybrid-gqa ([attention, DeltaNet, DeltaNet], 4 query heads on one kv head, 2 value heads per
// key head); at Qwen3.5-0.8B's full shapes on a real GPU.
//
// Tolerances. Megakernel vs per-operator path: the same bf16 cache values and fp32 states, different
// summation orders (matvec chunks, the delta rule's column sums by row groups, the gated norm by
// warps): kGpuSelfTolerance = 5e-3, as for Qwen3 (megakernel_test.cpp). Against the CPU engine with
// a bf16 KV cache (the rounding the GPU cache does; cuda_hybrid_engine_test.cpp explains why the fp32
// one is the wrong reference for these random models): kSameCacheTolerance = 1e-2. Greedy tokens must
// be the argmax of the kernel's own logits, and the per-operator argmax away from near-ties.
// The states the kernel leaves behind are checked by what follows them: per-operator decode steps on
// the same engine after a kernel run, and truncate() replaying the tokens the kernel appended.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "cuda/megakernel_test_util.h"
#include "cuda/model_fixture.h"
#include "engine/hf_fixture.h"
#include "megakernel/select_test_args.h"
#include "megaqwen/cuda/cuda_hybrid_engine.h"
#include "megaqwen/cuda/megakernel/runner.h"
#include "megaqwen/engine/cpu_qwen35_engine.h"
#include "megaqwen/engine/generator.h"
#include "megaqwen/util/error.h"
#include "scoped_env.h"

namespace megaqwen {
namespace {

using test::compare_teacher_forced;
using test::greedy_params;
using test::MkRun;
using test::run_megakernel;

constexpr double kGpuSelfTolerance = 5e-3;
constexpr double kSameCacheTolerance = 1e-2;

// fp32 prefill attention (the bf16-cache CPU engine's arithmetic; cuda_hybrid_engine_test.cpp).
cuda::CudaEngineOptions hybrid_options(int context, cuda::DecodeKernel kernel) {
  cuda::CudaEngineOptions o;
  o.context = context;
  o.tensor_core_prefill = false;
  o.decode_kernel = kernel;
  return o;
}

std::vector<int32_t> prompt_ids(int vocab, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = int32_t(rng() % uint64_t(vocab - 1));
  return ids;
}

class HybridMegakernel : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    MQ_REQUIRE_GPU_AND_CUBLAS();  // before the model is written
    model_ = test::tiny_hybrid_model(GetParam());
    MQ_REQUIRE_MEGAKERNEL(model_);
  }
  size_t V() const { return size_t(model_->config.vocab_size); }
  cuda::CudaHybridEngine megakernel(int context) const {
    return cuda::CudaHybridEngine(model_, hybrid_options(context, cuda::DecodeKernel::Megakernel));
  }
  cuda::CudaHybridEngine per_op(int context) const {
    return cuda::CudaHybridEngine(model_, hybrid_options(context, cuda::DecodeKernel::PerOp));
  }
  std::shared_ptr<const Model> model_;
};

// 128 greedy tokens after a prompt: the kernel's logits against the per-operator path and the CPU
// engine step by step; then per-operator decode steps on the same engine continue from the cache
// and states the kernel left, as the per-operator engine does.
TEST_P(HybridMegakernel, Greedy128MatchesPerOpAndCpuAndHandsOverItsStates) {
  const auto prompt = prompt_ids(int(V()), 20, 11);
  auto mk = megakernel(512);
  auto perop = per_op(512);
  CpuHybridEngine cpu(model_, {.context = 512, .threads = 0, .bf16_kv_cache = true});
  ASSERT_TRUE(mk.uses_megakernel()) << mk.decode_kernel_note();
  ASSERT_FALSE(perop.uses_megakernel());
  EXPECT_NE(mk.device_name().find("decode: megakernel"), std::string::npos) << mk.device_name();
  const int32_t first = test::argmax(mk.prefill(prompt));
  perop.prefill(prompt);
  cpu.prefill(prompt);
  const MkRun run = run_megakernel(mk, first, 128);
  EXPECT_EQ(mk.position(), int(prompt.size()) + 128);
  for (size_t i = 0; i < run.tokens.size(); ++i)
    ASSERT_EQ(run.tokens[i], test::argmax(test::logit_row(run.logits, i, V()))) << "step " << i;
  int hard = 0;
  const double vs_perop = compare_teacher_forced(perop, first, run, V(), &hard);
  EXPECT_LE(vs_perop, kGpuSelfTolerance);
  EXPECT_EQ(hard, 0) << "greedy tokens differ from the per-operator argmax away from near-ties";
  const double vs_cpu = compare_teacher_forced(cpu, first, run, V(), &hard);
  EXPECT_LE(vs_cpu, kSameCacheTolerance);
  EXPECT_EQ(hard, 0);
  std::printf("hybrid megakernel %s: worst logit error vs per-op %.3g, vs cpu (bf16 cache) %.3g over 128 steps\n",
              GetParam(), vs_perop, vs_cpu);
  // Both engines now hold the same 148 positions; per-operator steps continue on each.
  int32_t next = run.tokens.back();
  for (int i = 0; i < 8; ++i) {
    const auto a = mk.decode(next);
    const std::vector<float> mine(a.begin(), a.end());
    const auto b = perop.decode(next);
    EXPECT_LE(test::relative_max_error(mine, b), kGpuSelfTolerance) << "per-op step " << i << " after the kernel";
    next = test::argmax(mine);
  }
}

// The one-stage MLP (MEGAQWEN_MK_MLP=one-stage) after both mixers: 48 greedy tokens against the
// per-operator path and the CPU engine, rerun bit for bit, then per-operator steps continue from the
// states it left.
TEST_P(HybridMegakernel, OneStageMlpMatchesPerOpAndCpu) {
  const auto prompt = prompt_ids(int(V()), 20, 41);
  cuda::CudaHybridEngine mk = [&] {
    test::ScopedEnv env("MEGAQWEN_MK_MLP", "one-stage");
    return megakernel(512);
  }();
  ASSERT_TRUE(mk.uses_megakernel()) << mk.decode_kernel_note();
  EXPECT_NE(mk.decode_kernel_note().find("one-stage MLP"), std::string::npos) << mk.decode_kernel_note();
  auto perop = per_op(512);
  CpuHybridEngine cpu(model_, {.context = 512, .threads = 0, .bf16_kv_cache = true});
  const int32_t first = test::argmax(mk.prefill(prompt));
  perop.prefill(prompt);
  cpu.prefill(prompt);
  const MkRun run = run_megakernel(mk, first, 48);
  for (size_t i = 0; i < run.tokens.size(); ++i)
    ASSERT_EQ(run.tokens[i], test::argmax(test::logit_row(run.logits, i, V()))) << "step " << i;
  int hard = 0;
  EXPECT_LE(compare_teacher_forced(perop, first, run, V(), &hard), kGpuSelfTolerance);
  EXPECT_EQ(hard, 0);
  EXPECT_LE(compare_teacher_forced(cpu, first, run, V(), &hard), kSameCacheTolerance);
  EXPECT_EQ(hard, 0);
  int32_t next = run.tokens.back();
  for (int i = 0; i < 4; ++i) {
    const auto a = mk.decode(next);
    const std::vector<float> mine(a.begin(), a.end());
    EXPECT_LE(test::relative_max_error(mine, perop.decode(next)), kGpuSelfTolerance) << "per-op step " << i;
    next = test::argmax(mine);
  }
  mk.truncate(int(prompt.size()));
  const MkRun again = run_megakernel(mk, first, 48);
  EXPECT_EQ(again.tokens, run.tokens);
  EXPECT_EQ(std::memcmp(again.logits.data(), run.logits.data(), run.logits.size() * sizeof(float)), 0);
}

// Deep positions on noise-filled caches and states (the same deterministic noise in both engines):
// the attention layers' splits and merge at depth, the DeltaNet stages on large states.
TEST_P(HybridMegakernel, DeepPositionsMatchPerOp) {
  const int context = 9000;
  auto mk = megakernel(context);
  auto perop = per_op(context);
  for (int depth : {1, 63, 64, 65, 1000, 8200}) {
    mk.truncate(0);
    perop.truncate(0);
    mk.fill_cache_with_noise(depth);
    perop.fill_cache_with_noise(depth);
    const MkRun run = run_megakernel(mk, 1234, 5);
    int hard = 0;
    const double worst = compare_teacher_forced(perop, 1234, run, V(), &hard);
    EXPECT_LE(worst, kGpuSelfTolerance) << "depth " << depth;
    EXPECT_EQ(hard, 0) << "depth " << depth;
  }
}

// Repeated runs from the same state are bit-identical (greedy and sampled); truncate() back into a
// kernel run replays the tokens it appended, and the step after matches the kernel's own logits.
TEST_P(HybridMegakernel, RepeatsAreBitIdenticalAndTruncateReplaysKernelTokens) {
  const auto prompt = prompt_ids(int(V()), 33, 12);
  auto mk = megakernel(512);
  mk.prefill(prompt);
  const int P = int(prompt.size());
  const MkRun a = run_megakernel(mk, 77, 40);
  mk.truncate(P);  // onto the prefill's snapshot
  const MkRun b = run_megakernel(mk, 77, 40);
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)), 0);
  // Into the run: positions P .. P + 10 hold 77, tokens[0..9]; replayed from the snapshot at P.
  const int64_t replayed = mk.replayed_tokens();
  mk.truncate(P + 11);
  EXPECT_EQ(mk.replayed_tokens() - replayed, 11) << "truncate() did not replay the kernel's tokens";
  const auto step = mk.decode(a.tokens[10]);
  EXPECT_LE(test::relative_max_error(test::logit_row(a.logits, 11, V()), step), kSameCacheTolerance);
  EXPECT_EQ(test::argmax(step), a.tokens[11]);
  SamplingParams s;
  s.temperature = 0.9f;
  s.top_k = 20;
  s.top_p = 0.9f;
  s.repetition_penalty = 1.2f;
  s.seed = 5;
  const std::vector<int32_t> history(100, 7);
  mk.truncate(P);
  const MkRun c = run_megakernel(mk, 77, 40, s, history);
  mk.truncate(P);
  const MkRun d = run_megakernel(mk, 77, 40, s, history);
  EXPECT_EQ(c.tokens, d.tokens);
}

// Every sampling mode draws what the per-operator device sampler draws from the same history and key
// (teacher-forced with the kernel's tokens): Gumbel-max, the filtered draw with penalties, the nucleus.
TEST_P(HybridMegakernel, SampledRunsAgreeWithPerOpDeviceSampling) {
  const auto prompt = prompt_ids(int(V()), 16, 13);
  const SamplingParams cases[] = {test::sampling_params(0.8f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 42),
                                  test::sampling_params(0.6f, 20, 0.95f, 0.0f, 1.1f, 0.5f, 0.2f, 99),
                                  test::sampling_params(1.0f, 0, 0.8f, 0.05f, 1.0f, 0.0f, 0.0f, 3)};
  for (const SamplingParams& s : cases) {
    auto mk = megakernel(256);
    auto perop = per_op(256);
    mk.prefill(prompt);
    perop.prefill(prompt);
    std::vector<int32_t> history = prompt;
    const MkRun run = run_megakernel(mk, 500, 32, s, history);
    int same = 0;
    for (size_t i = 0; i < run.tokens.size(); ++i) {
      perop.decode_only(i == 0 ? 500 : run.tokens[i - 1]);
      if (i > 0) history.push_back(run.tokens[i - 1]);
      same += test::device_token(perop, s, history) == run.tokens[i];
    }
    EXPECT_GE(same, 30) << "T " << s.temperature << " k " << s.top_k << " p " << s.top_p << " min_p " << s.min_p;
  }
}

// Generator hands whole runs to the kernel: streaming, the budget, cancel, and the next request
// continuing after the cached prefix (a truncate into the kernel's tokens, replayed).
TEST_P(HybridMegakernel, GeneratorRunsOnTheKernelAndCancels) {
  const auto prompt = prompt_ids(int(V()), 24, 14);
  auto mk = megakernel(512);
  auto perop = per_op(512);
  GenerationRequest req;
  req.prompt = prompt;
  req.max_tokens = 48;
  req.sampling = greedy_params();
  Generator gm(mk), gp(perop);
  std::vector<int32_t> streamed;
  const auto a = gm.run(req, [&](int32_t t, std::string_view) {
    if (t >= 0) streamed.push_back(t);
    return true;
  });
  ASSERT_EQ(a.tokens.size(), 48u);
  EXPECT_EQ(streamed, a.tokens);
  EXPECT_EQ(mk.position(), int(prompt.size()) + 47);
  const auto b = gp.run(req);
  int prefix = 0;
  while (prefix < 48 && a.tokens[size_t(prefix)] == b.tokens[size_t(prefix)]) ++prefix;
  EXPECT_GE(prefix, 24) << "greedy runs of the two paths diverge early";
  gm.reset();
  int calls = 0;
  const auto c = gm.run(req, [&](int32_t t, std::string_view) { return t < 0 || ++calls < 5; });
  EXPECT_EQ(c.finish, FinishReason::Cancelled);
  EXPECT_EQ(c.tokens.size(), 5u);
  EXPECT_EQ(mk.position(), int(prompt.size()) + 4);
  const auto d = gm.run(req);
  EXPECT_EQ(d.tokens, a.tokens);
}

// Logprob requests stay on the kernel (its LM head scores each draw): the same greedy tokens as
// without them, each scored as the per-operator path's logits of the same step score it, within the
// two paths' logit bound (log_softmax moves by at most twice the largest logit change).
TEST_P(HybridMegakernel, GeneratorScoresOnTheKernel) {
  const auto prompt = prompt_ids(int(V()), 16, 15);
  auto mk = megakernel(256);
  GenerationRequest req;
  req.prompt = prompt;
  req.max_tokens = test::kEmulatedDevice ? 8 : 32;
  req.sampling = greedy_params();
  Generator gm(mk);
  const auto plain = gm.run(req);
  gm.reset();
  req.logprobs = 3;
  const uint64_t launches = mk.megakernel()->launches();
  const auto scored = gm.run(req);
  EXPECT_GT(mk.megakernel()->launches(), launches) << "logprobs left the megakernel";
  EXPECT_EQ(scored.tokens, plain.tokens);
  ASSERT_EQ(scored.logprobs.size(), scored.tokens.size());
  auto perop = per_op(256);
  auto logits = perop.prefill(prompt);
  for (size_t i = 0; i < scored.tokens.size(); ++i) {
    if (i > 0) logits = perop.decode(scored.tokens[i - 1]);
    float scale = 0;
    for (float x : logits) scale = std::max(scale, std::abs(x));
    const TokenLogprob want = token_logprob(logits, scored.tokens[i], 3);
    const TokenLogprob& got = scored.logprobs[i];
    EXPECT_EQ(got.token, scored.tokens[i]);
    EXPECT_LE(std::abs(double(got.logprob) - want.logprob), 2 * kGpuSelfTolerance * scale) << "step " << i;
    ASSERT_EQ(got.top.size(), 3u);
    EXPECT_EQ(got.top[0].token, got.token) << "step " << i << ": greedy draws the most likely token";
    EXPECT_GE(got.top[0].logprob, got.top[1].logprob);
    EXPECT_GE(got.top[1].logprob, got.top[2].logprob);
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, HybridMegakernel, ::testing::Values("tiny-hybrid", "tiny-hybrid-gqa"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// Qwen3.5-0.8B's shapes: 64 greedy tokens after a 128-token prompt, against the per-operator path.
TEST(HybridMegakernelFull, Qwen35_08bMatchesPerOp) {
  MQ_REQUIRE_GPU_AND_CUBLAS();
  MQ_SKIP_IF_EMULATED("24 layers of Qwen3.5-0.8B take hours per token");
  auto model = test::qwen35_full_model();
  MQ_REQUIRE_MEGAKERNEL(model);
  cuda::CudaHybridEngine mk(model, {.context = 256}), perop(model, {.context = 256, .decode_kernel = cuda::DecodeKernel::PerOp});
  ASSERT_TRUE(mk.uses_megakernel()) << mk.decode_kernel_note();
  std::printf("%s\n", mk.decode_kernel_note().c_str());
  const auto prompt = prompt_ids(model->config.vocab_size, 128, 21);
  const int32_t first = test::argmax(mk.prefill(prompt));
  perop.prefill(prompt);
  const MkRun run = run_megakernel(mk, first, 64);
  int hard = 0;
  const double worst = compare_teacher_forced(perop, first, run, size_t(model->config.vocab_size), &hard);
  std::printf("qwen3.5-0.8b megakernel: worst logit error vs per-op %.3g over 64 steps\n", worst);
  EXPECT_LE(worst, kGpuSelfTolerance);
  EXPECT_EQ(hard, 0);
}

}  // namespace
}  // namespace megaqwen

// The decode megakernel (src/megaqwen/cuda/megakernel) against the per-operator CUDA path and the CPU
// reference: logits of every step (teacher-forced with the megakernel's own tokens), greedy runs of
// 256 tokens, deep positions past 8k on noise-filled caches, bit-identical repeats, Generator
// integration (streaming, eos, budget, cancel), and the token-selection reduction alone (winner
// planted in every CTA's slice and at the edges; Gumbel-max draws against softmax(l / T)).
//
// Tolerances, as cuda_engine_test.cpp and for the same reasons: megakernel vs CPU 2e-2
// (kGpuLogitTolerance: bf16 KV cache), megakernel vs per-operator GPU path 5e-3 (kGpuSelfTolerance:
// same bf16 cache values, different summation order). Greedy tokens must equal the argmax of the
// megakernel's own logits exactly, and the per-operator path's argmax unless its top-2 gap is below
// 1e-3 of the largest logit (a near-tie that summation order may flip).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "cuda/model_fixture.h"
#include "engine/hf_fixture.h"
#include "megaqwen/cuda/cuda_engine.h"
#include "megaqwen/cuda/megakernel/megakernel.h"
#include "megaqwen/cuda/megakernel/runner.h"
#include "megaqwen/engine/cpu_engine.h"
#include "megaqwen/engine/generator.h"
#include "megaqwen/sampling/sampler.h"

namespace megaqwen {
namespace {

using test::relative_max_error;

constexpr double kGpuLogitTolerance = 2e-2;
constexpr double kGpuSelfTolerance = 5e-3;
constexpr double kNearTie = 1e-3;

std::vector<int32_t> random_ids(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = int32_t(rng() % 151000);
  return ids;
}

// Skips unless the megakernel applies to `model` on this GPU (and says why not).
#define MQ_REQUIRE_MEGAKERNEL(model)                                                                  \
  do {                                                                                                \
    MQ_REQUIRE_GPU_AND_CUBLAS();                                                                      \
    const std::string mq_mk_why_ = cuda::mk::Megakernel::unsupported_reason((model)->config, 0);     \
    if (!mq_mk_why_.empty()) GTEST_SKIP() << "megakernel not applicable: " << mq_mk_why_;            \
  } while (0)

cuda::CudaEngineOptions mk_options(int context) {
  return {.context = context, .decode_kernel = cuda::DecodeKernel::Megakernel};
}
cuda::CudaEngineOptions perop_options(int context) {
  return {.context = context, .decode_kernel = cuda::DecodeKernel::PerOp};
}

SamplingParams greedy_params() {
  SamplingParams p;
  p.temperature = 0;
  return p;
}

// Runs the megakernel for n draws after feeding `first`, returning the drawn tokens and every step's logits.
struct MkRun {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // [n, V]
};
MkRun run_megakernel(cuda::CudaEngine& gpu, int32_t first, int n, const SamplingParams& params = greedy_params(),
                     uint64_t step = 0) {
  const size_t V = size_t(gpu.config().vocab_size);
  auto logits = test::poisoned_f32(size_t(n) * V);
  // The poison is a cudaMemset on the legacy stream, which the engine's non-blocking stream does not
  // wait for: let it land before the kernel writes the logits.
  CUDA_CHECK(cudaDeviceSynchronize());
  MkRun r;
  const int drawn = gpu.megakernel_generate(first, n, {}, params, step, [&](int32_t id) {
    r.tokens.push_back(id);
    return true;
  }, logits.data());
  EXPECT_EQ(drawn, n);
  r.logits = test::download(logits, size_t(drawn) * V);
  return r;
}

std::span<const float> row(const std::vector<float>& all, size_t i, size_t V) { return {all.data() + i * V, V}; }

// Top-2 gap of a logit row, relative to its largest magnitude.
double top2_gap(std::span<const float> l) {
  float a = -INFINITY, b = -INFINITY, big = 0;
  for (float v : l) {
    big = std::max(big, std::abs(v));
    if (v > a) b = a, a = v;
    else if (v > b) b = v;
  }
  return big > 0 ? double(a - b) / big : 0.0;
}

// Feeds `first` then tokens[0..n-2] to `other` with decode() and compares each step's logits with
// the megakernel's. Returns the worst relative error; counts argmax disagreements that are not near-ties.
template <class E>
double compare_teacher_forced(E& other, int32_t first, const MkRun& mk, size_t V, int* hard_mismatches) {
  double worst = 0;
  *hard_mismatches = 0;
  for (size_t i = 0; i < mk.tokens.size(); ++i) {
    const int32_t in = i == 0 ? first : mk.tokens[i - 1];
    auto got = other.decode(in);
    std::vector<float> ref(got.begin(), got.end());
    worst = std::max(worst, relative_max_error(row(mk.logits, i, V), ref));
    if (test::argmax(ref) != mk.tokens[i] && top2_gap(ref) >= kNearTie) ++*hard_mismatches;
  }
  return worst;
}

TEST(Megakernel, SelectionWinnerInEveryCtaSliceAndAtTheEdges) {
  MQ_REQUIRE_GPU();
  for (int V : {1000, 151936}) {
    const auto base = test::random_floats(size_t(V), uint64_t(V) + 5, -10, 10);
    auto d = test::upload(base);
    for (int ctas : {1, 7, 132}) {
      cuda::DeviceBuffer<float> bv(static_cast<size_t>(ctas));
      cuda::DeviceBuffer<int32_t> bi(static_cast<size_t>(ctas)), out(1);
      cuda::DeviceBuffer<uint32_t> ticket(1);
      auto select = [&]() {
        CUDA_CHECK(cudaMemset(ticket.data(), 0, 4));
        CUDA_CHECK(cudaMemset(out.data(), 0xff, 4));
        cuda::mk::launch_select_test(d.data(), V, 1.0f, false, 0, 0, ctas, bv.data(), bi.data(), ticket.data(), out.data(),
                                     nullptr);
        return test::download(out)[0];
      };
      EXPECT_EQ(select(), argmax(base)) << "V " << V << " ctas " << ctas;
      const int per = (V + ctas - 1) / ctas;
      std::vector<int> spots = {0, V - 1};
      for (int b = 0; b < ctas && b * per < V; ++b) {
        spots.push_back(b * per);
        spots.push_back(std::min(V, (b + 1) * per) - 1);
      }
      for (int at : spots) {
        float hundred = 100.0f;
        CUDA_CHECK(cudaMemcpy(d.data() + at, &hundred, 4, cudaMemcpyHostToDevice));
        ASSERT_EQ(select(), at) << "V " << V << " ctas " << ctas << " winner at " << at;
        CUDA_CHECK(cudaMemcpy(d.data() + at, &base[size_t(at)], 4, cudaMemcpyHostToDevice));
      }
      // Ties: the lowest id wins, across CTA boundaries too.
      const int a = std::min(V - 1, per + 3), b = std::max(0, V - 2);
      float top = 200.0f;
      CUDA_CHECK(cudaMemcpy(d.data() + b, &top, 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(d.data() + a, &top, 4, cudaMemcpyHostToDevice));
      EXPECT_EQ(select(), std::min(a, b)) << "tie, V " << V << " ctas " << ctas;
      CUDA_CHECK(cudaMemcpy(d.data() + a, &base[size_t(a)], 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(d.data() + b, &base[size_t(b)], 4, cudaMemcpyHostToDevice));
    }
  }
}

// Gumbel-max draws (keyed by step) against the CPU Sampler's distribution softmax(l / T).
TEST(Megakernel, GumbelDrawsFollowTheSamplerDistribution) {
  MQ_REQUIRE_GPU();
  const int V = 12, draws = 20000, ctas = 5;
  const float T = 0.8f;
  const std::vector<float> logits = {1.0f, 0.5f, -0.3f, 2.0f, 1.9f, -1.0f, 0.0f, 0.7f, -2.0f, 1.2f, 0.1f, -0.5f};
  std::vector<double> p(static_cast<size_t>(V));
  double z = 0;
  const float mx = *std::max_element(logits.begin(), logits.end());
  for (int i = 0; i < V; ++i) z += p[size_t(i)] = std::exp(double(logits[size_t(i)] - mx) / T);
  for (double& x : p) x /= z;
  auto d = test::upload(logits);
  cuda::DeviceBuffer<float> bv(static_cast<size_t>(ctas));
  cuda::DeviceBuffer<int32_t> bi(static_cast<size_t>(ctas)), out(static_cast<size_t>(draws));
  cuda::DeviceBuffer<uint32_t> ticket(static_cast<size_t>(draws));
  CUDA_CHECK(cudaMemset(ticket.data(), 0, ticket.bytes()));
  for (int s = 0; s < draws; ++s)
    cuda::mk::launch_select_test(d.data(), V, T, true, 1234, uint64_t(s), ctas, bv.data(), bi.data(), ticket.data() + s,
                                 out.data() + s, nullptr);
  const auto got = test::download(out);
  std::vector<int> count(static_cast<size_t>(V));
  for (int id : got) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, V);
    ++count[size_t(id)];
  }
  for (int i = 0; i < V; ++i) {
    const double f = double(count[size_t(i)]) / draws, sd = std::sqrt(p[size_t(i)] * (1 - p[size_t(i)]) / draws);
    EXPECT_NEAR(f, p[size_t(i)], 5 * sd + 1e-3) << "id " << i;
  }
}

class MegakernelTiny : public ::testing::Test {
 protected:
  void SetUp() override {
    MQ_REQUIRE_GPU_AND_CUBLAS();  // before the model is written
    model_ = test::tiny_model();
    MQ_REQUIRE_MEGAKERNEL(model_);
  }
  size_t V() const { return size_t(model_->config.vocab_size); }
  std::shared_ptr<const Model> model_;
};

TEST_F(MegakernelTiny, Greedy256MatchesPerOpAndCpu) {
  const auto prompt = random_ids(20, 11);
  cuda::CudaEngine mk(model_, mk_options(1024)), perop(model_, perop_options(1024));
  CpuEngine cpu(model_, {.context = 1024, .threads = 0});
  ASSERT_TRUE(mk.uses_megakernel()) << mk.decode_kernel_note();
  ASSERT_FALSE(perop.uses_megakernel());
  auto l0 = mk.prefill(prompt);
  const int32_t first = test::argmax(l0);
  perop.prefill(prompt);
  cpu.prefill(prompt);
  const MkRun run = run_megakernel(mk, first, 256);
  EXPECT_EQ(mk.position(), int(prompt.size()) + 256);
  for (size_t i = 0; i < run.tokens.size(); ++i)
    ASSERT_EQ(run.tokens[i], test::argmax(row(run.logits, i, V()))) << "step " << i << ": not the argmax of its own logits";
  int hard = 0;
  const double vs_perop = compare_teacher_forced(perop, first, run, V(), &hard);
  EXPECT_LE(vs_perop, kGpuSelfTolerance);
  EXPECT_EQ(hard, 0) << "greedy tokens differ from the per-operator argmax away from near-ties";
  const double vs_cpu = compare_teacher_forced(cpu, first, run, V(), &hard);
  EXPECT_LE(vs_cpu, kGpuLogitTolerance);
  EXPECT_EQ(hard, 0);
  RecordProperty("worst_vs_perop", std::to_string(vs_perop));
  RecordProperty("worst_vs_cpu", std::to_string(vs_cpu));
  std::printf("megakernel tiny: worst logit error vs per-op %.3g, vs cpu %.3g over 256 steps\n", vs_perop, vs_cpu);
}

TEST_F(MegakernelTiny, DeepPositionsMatchPerOp) {
  const int context = 40960;
  cuda::CudaEngine mk(model_, mk_options(context)), perop(model_, perop_options(context));
  for (int depth : {1, 63, 64, 65, 127, 1000, 4095, 8200, 16384, 32767, 40955}) {
    mk.truncate(0);
    perop.truncate(0);
    mk.fill_cache_with_noise(depth);  // the same deterministic noise in both caches
    perop.fill_cache_with_noise(depth);
    const MkRun run = run_megakernel(mk, 1234, 5);
    int hard = 0;
    const double worst = compare_teacher_forced(perop, 1234, run, V(), &hard);
    EXPECT_LE(worst, kGpuSelfTolerance) << "depth " << depth;
    EXPECT_EQ(hard, 0) << "depth " << depth;
  }
}

TEST_F(MegakernelTiny, RepeatedRunsAreBitIdentical) {
  const auto prompt = random_ids(33, 12);
  cuda::CudaEngine mk(model_, mk_options(1024));
  mk.prefill(prompt);
  const MkRun a = run_megakernel(mk, 77, 64);
  mk.truncate(int(prompt.size()));
  const MkRun b = run_megakernel(mk, 77, 64);
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)), 0);
  // Sampling (Gumbel-max) with the same seed and step is reproducible too.
  SamplingParams s;
  s.temperature = 0.9f;
  s.seed = 5;
  mk.truncate(int(prompt.size()));
  const MkRun c = run_megakernel(mk, 77, 64, s, 100);
  mk.truncate(int(prompt.size()));
  const MkRun d = run_megakernel(mk, 77, 64, s, 100);
  EXPECT_EQ(c.tokens, d.tokens);
}

// Gumbel-max in the megakernel draws the same token as the per-operator device sampler when the
// logits agree: compare each step's draw with the per-op sampler on the megakernel's own logits' key.
TEST_F(MegakernelTiny, SampledRunsAgreeWithPerOpDeviceSampling) {
  const auto prompt = random_ids(16, 13);
  SamplingParams s;
  s.temperature = 0.8f;
  s.seed = 42;
  cuda::CudaEngine mk(model_, mk_options(1024)), perop(model_, perop_options(1024));
  mk.prefill(prompt);
  perop.prefill(prompt);
  std::vector<int32_t> history = prompt;
  const MkRun run = run_megakernel(mk, 500, 32, s, uint64_t(history.size()));
  int same = 0;
  for (size_t i = 0; i < run.tokens.size(); ++i) {
    perop.decode_only(i == 0 ? 500 : run.tokens[i - 1]);
    history.resize(prompt.size() + i);  // the key is the history length, as in Generator
    same += perop.sample_on_device(s, history) == run.tokens[i];
  }
  EXPECT_GE(same, 30) << "draws keyed alike from nearly equal logits should agree";
}

TEST_F(MegakernelTiny, GeneratorStreamsStopsAndCancels) {
  const auto prompt = random_ids(24, 14);
  cuda::CudaEngine mk(model_, mk_options(1024)), perop(model_, perop_options(1024));
  GenerationRequest req;
  req.prompt = prompt;
  req.max_tokens = 64;
  req.sampling = greedy_params();
  Generator gm(mk), gp(perop);
  std::vector<int32_t> streamed;
  const auto a = gm.run(req, [&](int32_t t, std::string_view) {
    if (t >= 0) streamed.push_back(t);
    return true;
  });
  EXPECT_EQ(a.finish, FinishReason::Length);
  ASSERT_EQ(a.tokens.size(), 64u);
  EXPECT_EQ(streamed, a.tokens);
  EXPECT_EQ(mk.position(), int(prompt.size()) + 63);  // the last token is never decoded
  EXPECT_EQ(gm.cached_tokens().size(), size_t(mk.position()));
  const auto b = gp.run(req);
  int prefix = 0;
  while (prefix < 64 && a.tokens[size_t(prefix)] == b.tokens[size_t(prefix)]) ++prefix;
  EXPECT_GE(prefix, 32) << "greedy runs of the two paths diverge early";

  // eos: the 10th token as the eos id ends the run before it (if it did not occur earlier).
  const int32_t eos = a.tokens[9];
  const size_t first_eos = size_t(std::find(a.tokens.begin(), a.tokens.end(), eos) - a.tokens.begin());
  req.eos_ids = {eos};
  gm.reset();
  const auto c = gm.run(req);
  EXPECT_EQ(c.finish, FinishReason::Eos);
  EXPECT_EQ(c.tokens, std::vector<int32_t>(a.tokens.begin(), a.tokens.begin() + long(first_eos)));
  EXPECT_EQ(mk.position(), int(prompt.size() + first_eos));

  // Cancel at the 5th token.
  req.eos_ids.clear();
  gm.reset();
  int calls = 0;
  const auto d = gm.run(req, [&](int32_t t, std::string_view) { return t < 0 || ++calls < 5; });
  EXPECT_EQ(d.finish, FinishReason::Cancelled);
  EXPECT_EQ(d.tokens.size(), 5u);
  EXPECT_EQ(mk.position(), int(prompt.size()) + 4);
  // The engine stays usable: the next request continues after the cached prefix.
  const auto e = gm.run(req);
  EXPECT_EQ(e.tokens, a.tokens);
}

TEST(MegakernelFull, Qwen3_06bMatchesPerOpAndCpu) {
  MQ_REQUIRE_GPU_AND_CUBLAS();  // before the 1.2 GB model is written
  auto model = test::full_model();
  MQ_REQUIRE_MEGAKERNEL(model);
  const size_t V = size_t(model->config.vocab_size);
  const auto prompt = random_ids(32, 15);
  cuda::CudaEngine mk(model, mk_options(9000)), perop(model, perop_options(9000));
  ASSERT_TRUE(mk.uses_megakernel()) << mk.decode_kernel_note();
  std::printf("%s\n", mk.decode_kernel_note().c_str());
  auto l0 = mk.prefill(prompt);
  const int32_t first = test::argmax(l0);
  perop.prefill(prompt);
  const MkRun run = run_megakernel(mk, first, 256);
  int hard = 0;
  const double vs_perop = compare_teacher_forced(perop, first, run, V, &hard);
  EXPECT_LE(vs_perop, kGpuLogitTolerance);
  EXPECT_LE(hard, 2) << "of 256 greedy steps";
  // The CPU reference for the first 24 steps (28 layers on the CPU are slow).
  CpuEngine cpu(model, {.context = 512, .threads = 0});
  cpu.prefill(prompt);
  MkRun head{std::vector<int32_t>(run.tokens.begin(), run.tokens.begin() + 24),
             std::vector<float>(run.logits.begin(), run.logits.begin() + long(24 * V))};
  int hard_cpu = 0;
  const double vs_cpu = compare_teacher_forced(cpu, first, head, V, &hard_cpu);
  EXPECT_LE(vs_cpu, kGpuLogitTolerance);
  EXPECT_LE(hard_cpu, 1);
  // Past 8k: noise caches, a few steps each.
  double deep = 0;
  for (int depth : {4095, 8200}) {
    mk.truncate(0);
    perop.truncate(0);
    mk.fill_cache_with_noise(depth);
    perop.fill_cache_with_noise(depth);
    const MkRun r = run_megakernel(mk, 1234, 8);
    int h = 0;
    deep = std::max(deep, compare_teacher_forced(perop, 1234, r, V, &h));
    EXPECT_LE(h, 1) << "depth " << depth;
  }
  EXPECT_LE(deep, kGpuLogitTolerance);
  RecordProperty("worst_vs_perop", std::to_string(vs_perop));
  RecordProperty("worst_vs_cpu", std::to_string(vs_cpu));
  std::printf("megakernel qwen3-0.6b: worst logit error vs per-op %.3g (256 steps), vs cpu %.3g (24 steps), deep %.3g\n",
              vs_perop, vs_cpu, deep);
}

}  // namespace
}  // namespace megaqwen

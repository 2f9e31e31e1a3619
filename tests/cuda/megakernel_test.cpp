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
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "cuda/megakernel_test_util.h"
#include "cuda/model_fixture.h"
#include "engine/hf_fixture.h"
#include "megaqwen/cuda/cuda_engine.h"
#include "megaqwen/cuda/device_sampler.h"
#include "megaqwen/cuda/megakernel/megakernel.h"
#include "megaqwen/cuda/megakernel/runner.h"
#include "megaqwen/engine/cpu_engine.h"
#include "megaqwen/engine/generator.h"
#include "megaqwen/sampling/sampler.h"
#include "megakernel/select_test_args.h"
#include "scoped_env.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

using test::greedy_select;
using test::kEmulatedDevice;
using test::relative_max_error;
using test::random_ids;
using test::sampling_params;
using test::select_args;

using test::compare_teacher_forced;
using test::greedy_params;
using test::MkRun;
using test::run_megakernel;

constexpr double kGpuLogitTolerance = 2e-2;
constexpr double kGpuSelfTolerance = 5e-3;

cuda::CudaEngineOptions mk_options(int context) {
  return {.context = context, .decode_kernel = cuda::DecodeKernel::Megakernel};
}
cuda::CudaEngineOptions perop_options(int context) {
  return {.context = context, .decode_kernel = cuda::DecodeKernel::PerOp};
}

std::span<const float> row(const std::vector<float>& all, size_t i, size_t V) { return test::logit_row(all, i, V); }

// The LM head's token selection alone (mk::launch_select_test) with its scratch, over device logits.
struct Selector {
  int ctas, V;
  cuda::DeviceBuffer<float> best_v, sel_vals, cand_v;
  cuda::DeviceBuffer<int32_t> best_i, cand_i, cand_n, out;
  cuda::DeviceBuffer<uint32_t> ticket;
  Selector(int ctas_, int V_)
      : ctas(ctas_), V(V_), best_v(size_t(ctas_)), sel_vals(size_t(V_)), cand_v(size_t(ctas_) * cuda::mk::kMaxTopK),
        best_i(size_t(ctas_)), cand_i(size_t(ctas_) * cuda::mk::kMaxTopK), cand_n(size_t(ctas_)), out(1), ticket(1) {}
  // One draw with `a`'s rule (its scratch fields are filled in here).
  int32_t select(cuda::mk::SelectTestArgs a) {
    a.V = V;
    a.best_v = best_v.data();
    a.best_i = best_i.data();
    a.sel_vals = sel_vals.data();
    a.cand_v = cand_v.data();
    a.cand_i = cand_i.data();
    a.cand_n = cand_n.data();
    a.ticket = ticket.data();
    a.out = out.data();
    CUDA_CHECK(cudaMemset(ticket.data(), 0, 4));
    CUDA_CHECK(cudaMemset(out.data(), 0xff, 4));  // -1: a selection that writes nothing shows
    cuda::mk::launch_select_test(a, ctas, nullptr);
    int32_t id = -2;
    CUDA_CHECK(cudaMemcpy(&id, out.data(), sizeof id, cudaMemcpyDeviceToHost));  // legacy stream: waits
    return id;
  }
};


// The edge probe (bench_mk_edges's kernel) runs every round on every CTA: the counter ends at
// ctas x edges and every element of the last vector at `edges` (each round adds 1 to what the previous
// round's vector held, read back through L2 after the edge), with either poll form.
TEST(Megakernel, EdgeProbeRunsEveryRound) {
  MQ_REQUIRE_GPU();
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  struct Case {
    int ctas, n, edges;
    uint32_t ablate;
  };
  for (const Case& c : {Case{3, 100, 5, 0}, Case{4, 0, 7, cuda::mk::kAblateRelaxedSpin},
                        Case{prop.multiProcessorCount, 1024, kEmulatedDevice ? 3 : 50, 0},
                        Case{prop.multiProcessorCount, 3072, kEmulatedDevice ? 2 : 50, cuda::mk::kAblateRelaxedSpin}}) {
    cuda::DeviceBuffer<uint32_t> counter(1);
    cuda::DeviceBuffer<float> vec(size_t(2 * std::max(c.n, 1)));
    CUDA_CHECK(cudaMemset(counter.data(), 0, sizeof(uint32_t)));
    CUDA_CHECK(cudaMemset(vec.data(), 0, vec.bytes()));
    cuda::mk::launch_edge_probe({counter.data(), vec.data(), c.n, c.edges, c.ablate}, c.ctas, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::string where = std::to_string(c.ctas) + " CTAs, n " + std::to_string(c.n);
    EXPECT_EQ(test::download(counter)[0], uint32_t(c.ctas * c.edges)) << where;
    const auto v = test::download(vec);
    for (int i = 0; i < c.n; ++i) ASSERT_EQ(v[size_t((c.edges & 1) * c.n + i)], float(c.edges)) << where << " element " << i;
  }
  cuda::DeviceBuffer<uint32_t> counter(1);
  EXPECT_THROW(cuda::mk::launch_edge_probe({counter.data(), nullptr, 0, 1, 0}, 0, nullptr), Error);
  EXPECT_THROW(cuda::mk::launch_edge_probe({counter.data(), nullptr, 16, 1, 0}, 2, nullptr), Error);
}

// The flagged form (no counter: the readers poll the words, sync.cuh's load_flagged) runs every round
// on every CTA too: after E rounds every word of buf[E & 1] holds the value E written in round E; one
// word per CTA (the edge alone), ragged slices (CTAs without words), and the widest vector. It refuses
// vectors it cannot hold.
TEST(Megakernel, FlaggedEdgeProbeRunsEveryRound) {
  MQ_REQUIRE_GPU();
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  struct Case {
    int ctas, n, edges;
  };
  for (const Case& c : {Case{3, 3, 6}, Case{4, 10, 5}, Case{5, 3, 4}, Case{sms, sms, kEmulatedDevice ? 3 : 200},
                        Case{sms, cuda::mk::kEdgeProbeMaxFlagged, kEmulatedDevice ? 2 : 50}}) {
    cuda::DeviceBuffer<uint64_t> words(size_t(2 * c.n));
    CUDA_CHECK(cudaMemset(words.data(), 0, words.bytes()));
    cuda::mk::launch_edge_probe({nullptr, nullptr, c.n, c.edges, 0, words.data()}, c.ctas, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::string where = std::to_string(c.ctas) + " CTAs, n " + std::to_string(c.n);
    const auto w = test::download(words);
    for (int i = 0; i < c.n; ++i) {
      const uint64_t word = w[size_t((c.edges & 1) * c.n + i)];
      float v;
      const uint32_t bits = uint32_t(word);
      std::memcpy(&v, &bits, 4);
      ASSERT_EQ(uint32_t(word >> 32), uint32_t(c.edges)) << where << " word " << i << ": round";
      ASSERT_EQ(v, float(c.edges)) << where << " word " << i << ": value";
    }
  }
  cuda::DeviceBuffer<uint64_t> words(2);
  EXPECT_THROW(cuda::mk::launch_edge_probe({nullptr, nullptr, 0, 1, 0, words.data()}, 2, nullptr), Error);
  EXPECT_THROW(cuda::mk::launch_edge_probe({nullptr, nullptr, cuda::mk::kEdgeProbeMaxFlagged + 1, 1, 0, words.data()}, 2,
                                           nullptr),
               Error);
}

TEST(Megakernel, SelectionWinnerInEveryCtaSliceAndAtTheEdges) {
  MQ_REQUIRE_GPU();
  // Emulated: a 4,097-id vocabulary, and the winner in the first two, a middle and the last two slices.
  for (int V : {1000, kEmulatedDevice ? 4097 : 151936}) {
    const auto base = test::random_floats(size_t(V), uint64_t(V) + 5, -10, 10);
    auto d = test::upload(base);
    for (int ctas : {1, 7, 132}) {
      Selector sel(ctas, V);
      auto select = [&]() { return sel.select(greedy_select(d.data())); };
      EXPECT_EQ(select(), argmax(base)) << "V " << V << " ctas " << ctas;
      const int per = (V + ctas - 1) / ctas;
      const std::vector<int> spots = test::slice_edge_ids(V, ctas);
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

// The CPU Sampler's distribution for these logits and parameters, as probabilities per id.
std::vector<double> sampler_probabilities(const std::vector<float>& logits, const SamplingParams& p,
                                          const std::vector<int32_t>& history) {
  Sampler s(p);
  std::vector<float> l = logits;
  std::vector<double> out(logits.size(), 0.0);
  for (const auto& c : s.distribution(l, history)) out[size_t(c.id)] = c.prob;
  return out;
}


// Draw frequencies of the kernel's selection (Gumbel-max, the filtered top-k / top-p / min-p path, and
// the nucleus path: top-p or min-p without a top-k; with and without penalties) against the CPU
// Sampler's probabilities. 20,000 draws: a probability's
// standard error is sqrt(p(1-p)/20000) <= 0.0036; the bound is 5 of them + 1e-3, and ids the Sampler
// filters out must never be drawn. V = 40 over 5 CTAs (8 ids each: top_k 20 exceeds a slice, so
// the per-CTA lists are partial) and over 1 CTA. Emulated: 1,000 draws over 5 CTAs (the bound
// follows the draw count).
TEST(Megakernel, DrawsFollowTheSamplerDistribution) {
  MQ_REQUIRE_GPU();
  const int V = 40, draws = kEmulatedDevice ? 1000 : 20000;
  const auto logits = test::random_floats(size_t(V), 5, -2, 2);
  const std::vector<int32_t> history = {3, 3, 7, 11, 11, 11, 39};
  std::vector<int32_t> counts(size_t(V), 0);
  for (int32_t id : history) ++counts[size_t(id)];
  auto d = test::upload(logits);
  auto dc = test::upload(counts);
  const SamplingParams cases[] = {
      sampling_params(0.8f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1234),  sampling_params(1.0f, 10, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1234),
      sampling_params(0.7f, 20, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 1234), sampling_params(1.3f, 20, 0.9f, 0.1f, 1.0f, 0.0f, 0.0f, 1234),
      sampling_params(0.6f, 20, 0.95f, 0.0f, 1.3f, 0.5f, 0.2f, 1234), sampling_params(1.0f, 0, 1.0f, 0.0f, 1.2f, 0.0f, 0.4f, 1234),
      sampling_params(1.0f, 1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1234),  sampling_params(0.9f, 40, 0.8f, 0.0f, 1.0f, 0.0f, 0.0f, 1234),
      sampling_params(0.9f, 0, 0.85f, 0.0f, 1.0f, 0.0f, 0.0f, 1234), sampling_params(1.1f, 0, 1.0f, 0.05f, 1.2f, 0.3f, 0.0f, 1234)};
  for (int ctas : {5, 1}) {
    if (kEmulatedDevice && ctas == 1) continue;
    Selector sel(ctas, V);
    for (const SamplingParams& p : cases) {
      const auto want = sampler_probabilities(logits, p, history);
      std::vector<double> freq(size_t(V), 0.0);
      for (int s = 0; s < draws; ++s) {
        const int32_t id = sel.select(select_args(d.data(), p, dc.data(), uint64_t(s)));
        ASSERT_GE(id, 0) << "step " << s;
        ASSERT_LT(id, V);
        freq[size_t(id)] += 1.0 / draws;
      }
      for (int i = 0; i < V; ++i) {
        const double sd = std::sqrt(want[size_t(i)] * (1 - want[size_t(i)]) / draws);
        EXPECT_NEAR(freq[size_t(i)], want[size_t(i)], 5 * sd + 1e-3)
            << "id " << i << ", ctas " << ctas << ", T " << p.temperature << " k " << p.top_k << " p " << p.top_p
            << " min_p " << p.min_p << " penalties " << p.repetition_penalty << "/" << p.presence_penalty << "/"
            << p.frequency_penalty;
        if (want[size_t(i)] == 0.0) {
          EXPECT_EQ(freq[size_t(i)], 0.0) << "id " << i << " is filtered out but was drawn";
        }
      }
    }
  }
}

// The nucleus path (top-p / min-p, no top-k) over Qwen3's 151,936 ids on the H200's 132 CTAs: with a
// flat distribution the top-p set holds most of the vocabulary; every draw lies in the CPU Sampler's
// kept set (fp32 against fp64 exp may move the cut by an id: at most one draw of the 24 outside), the
// draws leave the top 1,024 ids as often as the set's mass there says (~96%: a sampler confined to a
// top-k buffer would never leave them), and the boundary bin searched in shared memory (member
// buffer) or over all V (capacity 0) gives the same id. Emulated, and under compute-sanitizer
// (gpu-check.sh sets MEGAQWEN_TEST_QUICK): 2 draws, none outside the set.
TEST(Megakernel, SelectionNucleusDrawsFromTheWholeTopPSet) {
  MQ_REQUIRE_GPU();
  const bool quick = kEmulatedDevice || std::getenv("MEGAQWEN_TEST_QUICK") != nullptr;
  const int V = 151936, ctas = 132, draws = quick ? 2 : 24;
  const auto logits = test::random_floats(size_t(V), 31, -3, 3);
  const SamplingParams p = sampling_params(1.0f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 5);
  std::vector<float> work = logits;
  const auto dist = Sampler(p).distribution(work, {});
  ASSERT_GT(dist.size(), size_t(50000));
  std::vector<char> kept(size_t(V), 0);
  for (const auto& d : dist) kept[size_t(d.id)] = 1;
  std::vector<char> top1024(size_t(V), 0);  // dist is sorted, most likely first
  double mass_beyond = 0;
  for (size_t j = 0; j < dist.size(); ++j) {
    if (j < 1024) top1024[size_t(dist[j].id)] = 1;
    else mass_beyond += dist[j].prob;
  }
  auto d = test::upload(logits);
  Selector sel(ctas, V);
  int outside = 0, beyond = 0;
  for (int s = 0; s < draws; ++s) {
    auto a = select_args(d.data(), p, nullptr, uint64_t(s));
    ASSERT_TRUE(a.nucleus);
    const int32_t id = sel.select(a);
    ASSERT_GE(id, 0) << "step " << s;
    ASSERT_LT(id, V);
    outside += !kept[size_t(id)];
    beyond += !top1024[size_t(id)];
    a.member_capacity = 0;
    EXPECT_EQ(sel.select(a), id) << "step " << s << ": the search over all V differs from the member buffer's";
  }
  EXPECT_LE(outside, quick ? 0 : 1) << "draws outside the Sampler's top-p set";
  // Binomial(draws, mass_beyond): at least its mean minus 4 standard deviations.
  const double mean = draws * mass_beyond, sd = std::sqrt(draws * mass_beyond * (1 - mass_beyond));
  EXPECT_GE(beyond, int(std::floor(mean - 4 * sd))) << "draws beyond the top 1,024 ids, of " << draws
                                                     << " (the set's mass there: " << mass_beyond << ")";
  EXPECT_GE(beyond, 1);
}

// The filtered path finds exactly the top k of the full vocabulary wherever the winners sit: all of
// them in one CTA's slice, on slice edges, at both ends, tied across CTA boundaries (lowest ids win).
// With top_p tiny the draw is the best candidate; with top_k = k and a planted top k of equal
// values the draws (uniform over them) must cover exactly the planted ids. Emulated: 4,097 ids (32
// per CTA) and fewer draws.
TEST(Megakernel, FilteredSelectionFindsTheTopKAcrossCtaSlices) {
  MQ_REQUIRE_GPU();
  const int V = kEmulatedDevice ? 4097 : 151936, ctas = 132, per = (V + ctas - 1) / ctas;
  const uint64_t scale = kEmulatedDevice ? 5 : 1;  // emulated: a fifth of the draws
  const auto base = test::random_floats(size_t(V), 77, -8, 8);
  auto d = test::upload(base);
  Selector sel(ctas, V);
  SamplingParams p;
  p.temperature = 0.7f;
  p.seed = 3;
  auto set_at = [&](int i, float v) { CUDA_CHECK(cudaMemcpy(d.data() + i, &v, 4, cudaMemcpyHostToDevice)); };
  // Unplanted: top_k 1 and a tiny top_p are the argmax; top_k 20 stays inside the true top 20.
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return base[size_t(a)] > base[size_t(b)]; });
  for (uint64_t step = 0; step < 30 / scale; ++step) {
    p.top_k = 1;
    p.top_p = 1.0f;
    EXPECT_EQ(sel.select(select_args(d.data(), p, nullptr, step)), order[0]);
    p.top_k = 64;
    p.top_p = 1e-6f;
    EXPECT_EQ(sel.select(select_args(d.data(), p, nullptr, step)), order[0]);
    p.top_k = 20;
    p.top_p = 1.0f;
    const int32_t id = sel.select(select_args(d.data(), p, nullptr, step));
    EXPECT_TRUE(std::find(order.begin(), order.begin() + 20, id) != order.begin() + 20) << id;
  }
  // Planted: k ids with value 50 (equal: the draw is uniform over them).
  const int k = 16;
  std::vector<std::vector<int>> layouts;
  layouts.push_back({});
  for (int i = 0; i < k; ++i) layouts.back().push_back(5 * per + 3 + i);  // all in CTA 5
  layouts.push_back({0, V - 1});
  for (int b = 1; layouts.back().size() < size_t(k); b += 9) {  // slice edges
    layouts.back().push_back(b * per - 1);
    layouts.back().push_back(b * per);
  }
  for (const auto& planted : layouts) {
    for (int i : planted) set_at(i, 50.0f);
    p.top_k = k;
    p.top_p = 1.0f;
    p.temperature = 1.0f;
    std::set<int32_t> seen;
    for (uint64_t step = 0; step < 400 / scale; ++step) {
      const int32_t id = sel.select(select_args(d.data(), p, nullptr, step));
      ASSERT_TRUE(std::find(planted.begin(), planted.end(), id) != planted.end()) << "drew " << id << " outside the planted top k";
      seen.insert(id);
    }
    EXPECT_EQ(seen.size(), size_t(k)) << "uniform draws over 16 ids should reach each in " << 400 / scale << " draws";
    // top_k smaller than the tie: the lowest ids of the tie.
    p.top_k = 4;
    std::vector<int> sorted = planted;
    std::sort(sorted.begin(), sorted.end());
    std::set<int32_t> low;
    for (uint64_t step = 0; step < 200 / scale; ++step) low.insert(sel.select(select_args(d.data(), p, nullptr, step)));
    EXPECT_EQ(low, std::set<int32_t>(sorted.begin(), sorted.begin() + 4)) << "ties must go to the lowest ids";
    for (int i : planted) set_at(i, base[size_t(i)]);
  }
}

// Greedy with penalties: the kernel's transform is the CPU Sampler's, so the choice is the same.
TEST(Megakernel, GreedyWithPenaltiesMatchesTheSampler) {
  MQ_REQUIRE_GPU();
  const int V = kEmulatedDevice ? 4097 : 151936;
  const auto logits = test::random_floats(size_t(V), 21, -4, 4);
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[size_t(a)] > logits[size_t(b)]; });
  // The history repeats the top ids so the penalties change the winner.
  const std::vector<int32_t> history = {order[0], order[0], order[1], order[2], order[2], order[2], 5, V - 1};
  std::vector<int32_t> counts(size_t(V), 0);
  for (int32_t id : history) ++counts[size_t(id)];
  auto d = test::upload(logits);
  auto dc = test::upload(counts);
  Selector sel(132, V);
  for (float rep : {1.0f, 1.5f, 0.7f})
    for (float presence : {0.0f, 1.0f})
      for (float frequency : {0.0f, 0.8f}) {
        const SamplingParams p = sampling_params(0.0f, 0, 1.0f, 0.0f, rep, presence, frequency, 0);  // greedy
        Sampler cpu(p);
        std::vector<float> l = logits;
        EXPECT_EQ(sel.select(select_args(d.data(), p, dc.data(), 0)), cpu.sample(l, history))
            << "repetition " << rep << " presence " << presence << " frequency " << frequency;
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
  // A megakernel engine (context 512) built with the environment variable `var` set to `value` (empty:
  // unset), as a user would switch the kernel's forms (MEGAQWEN_MK_*).
  cuda::CudaEngine engine_with(const char* var, const std::string& value) const {
    test::ScopedEnv env(var, value.empty() ? std::nullopt : std::optional<std::string>(value));
    return cuda::CudaEngine(model_, mk_options(512));
  }
  // Each of `bad` in `var` is refused when the engine is built, by an error that names the variable.
  void expect_refused(const char* var, std::initializer_list<const char*> bad) const {
    for (const char* value : bad) {
      try {
        (void)engine_with(var, value);
        ADD_FAILURE() << var << "=" << value << " was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(var), std::string::npos) << e.what();
      }
    }
  }
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

// YaRN RoPE scaling: the kernel's softmax scale carries the attention factor and its frequencies
// are the model's; greedy steps past the original context of 64 match the CPU engine.
TEST(MegakernelYarn, GreedyPastTheOriginalContextMatchesCpu) {
  MQ_REQUIRE_GPU_AND_CUBLAS();
  const auto model = test::yarn_variant(test::synth_model_dir("tiny", test::kEmulatedDevice ? test::kEmulatedTinyVocab : 0));
  MQ_REQUIRE_MEGAKERNEL(model);
  const auto prompt = random_ids(40, 23);
  cuda::CudaEngine mk(model, mk_options(256));
  CpuEngine cpu(model, {.context = 256, .threads = 0});
  ASSERT_TRUE(mk.uses_megakernel()) << mk.decode_kernel_note();
  const int32_t first = test::argmax(mk.prefill(prompt));
  cpu.prefill(prompt);
  const MkRun run = run_megakernel(mk, first, 48);  // positions 40 .. 88
  int hard = 0;
  const double worst = compare_teacher_forced(cpu, first, run, size_t(model->config.vocab_size), &hard);
  EXPECT_LE(worst, kGpuLogitTolerance);
  EXPECT_EQ(hard, 0);
  RecordProperty("yarn_worst_vs_cpu", std::to_string(worst));
}

TEST_F(MegakernelTiny, RepeatedRunsAreBitIdentical) {
  // Under compute-sanitizer (gpu-check.sh sets MEGAQWEN_TEST_QUICK) racecheck takes minutes per run.
  const int n = std::getenv("MEGAQWEN_TEST_QUICK") ? 8 : 64;
  const auto prompt = random_ids(33, 12);
  cuda::CudaEngine mk(model_, mk_options(1024));
  mk.prefill(prompt);
  const MkRun a = run_megakernel(mk, 77, n);
  mk.truncate(int(prompt.size()));
  const MkRun b = run_megakernel(mk, 77, n);
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)), 0);
  // Sampling (Gumbel-max) with the same seed and step is reproducible too.
  SamplingParams s;
  s.temperature = 0.9f;
  s.seed = 5;
  mk.truncate(int(prompt.size()));
  const std::vector<int32_t> history(100, 7);  // keys the draws from step 100
  const MkRun c = run_megakernel(mk, 77, n, s, history);
  mk.truncate(int(prompt.size()));
  const MkRun d = run_megakernel(mk, 77, n, s, history);
  EXPECT_EQ(c.tokens, d.tokens);
  // Filtered sampling with penalties likewise.
  s.top_k = 20;
  s.top_p = 0.9f;
  s.repetition_penalty = 1.2f;
  mk.truncate(int(prompt.size()));
  const MkRun e = run_megakernel(mk, 77, n, s, history);
  mk.truncate(int(prompt.size()));
  const MkRun f = run_megakernel(mk, 77, n, s, history);
  EXPECT_EQ(e.tokens, f.tokens);
}

// Two runs of the same steps drew the same tokens from bit-identical logits (`what` names the variant).
void expect_same_bits(const MkRun& run, const MkRun& reference, const std::string& what) {
  EXPECT_EQ(run.tokens, reference.tokens) << what;
  ASSERT_EQ(run.logits.size(), reference.logits.size()) << what;
  EXPECT_EQ(std::memcmp(run.logits.data(), reference.logits.data(), run.logits.size() * sizeof(float)), 0) << what;
}

// The ablation switches (MEGAQWEN_MK_ABLATE: the conservative fences, acquire polling, refill before
// the signal, the merge by the last attention split) change timing, never results: each one and all
// of them give bit-identical logits and tokens.
TEST_F(MegakernelTiny, AblationsChangeNothingButTiming) {
  const auto prompt = random_ids(20, 19);
  MkRun reference;
  for (int ablate : {0, 1, 2, 4, 8, 15}) {
    cuda::CudaEngine mk = engine_with("MEGAQWEN_MK_ABLATE", std::to_string(ablate));
    ASSERT_EQ(mk.megakernel()->ablate(), uint32_t(ablate));
    mk.prefill(prompt);
    const MkRun run = run_megakernel(mk, 321, 48);
    if (ablate == 0) {
      reference = run;
      continue;
    }
    expect_same_bits(run, reference, "MEGAQWEN_MK_ABLATE=" + std::to_string(ablate));
  }
  expect_refused("MEGAQWEN_MK_ABLATE", {"16", "x"});
}

// Who merges the attention splits (MEGAQWEN_MK_MERGE_SPLITS: stage C up to that many non-empty
// splits, else the last split) changes timing, never results: a run that starts merging in stage C
// and switches mid-launch (1: at the second non-empty split) and one that never merges there (0)
// give the default's bits; values outside 0..32 are refused with the variable's name.
TEST_F(MegakernelTiny, MergeSplitsChangeNothingButTiming) {
  const auto prompt = random_ids(60, 23);
  MkRun reference;
  for (const char* merge : {"", "1", "0", "32"}) {
    cuda::CudaEngine mk = engine_with("MEGAQWEN_MK_MERGE_SPLITS", merge);
    mk.prefill(prompt);
    const MkRun run = run_megakernel(mk, 321, 24);  // positions 60..83: the second split of 64 fills
    if (!*merge) {
      reference = run;
      continue;
    }
    expect_same_bits(run, reference, std::string("MEGAQWEN_MK_MERGE_SPLITS=") + merge);
  }
  expect_refused("MEGAQWEN_MK_MERGE_SPLITS", {"33", "-1", "two"});
}

// Flagged vectors (MEGAQWEN_MK_VECTORS=flagged: x, xmid and act carry their token's epoch, the readers
// poll the words instead of the all-CTA counters) change timing, never results. Two launches in a row
// on one engine: the second's epochs start at 1 again, so it is right only because the words are zeroed
// before each launch. Greedy and filtered sampling with penalties; bad values are refused by name.
TEST_F(MegakernelTiny, FlaggedVectorsChangeNothingButTiming) {
  const auto prompt = random_ids(30, 29);
  SamplingParams filtered;
  filtered.temperature = 0.8f;
  filtered.top_k = 20;
  filtered.top_p = 0.9f;
  filtered.repetition_penalty = 1.1f;
  filtered.seed = 3;
  std::vector<MkRun> reference;
  for (const char* vectors : {"", "counters", "flagged"}) {
    cuda::CudaEngine mk = engine_with("MEGAQWEN_MK_VECTORS", vectors);
    EXPECT_EQ(mk.megakernel()->flagged_vectors(), std::string(vectors) == "flagged");
    mk.prefill(prompt);
    std::vector<MkRun> runs;
    runs.push_back(run_megakernel(mk, 321, 20));
    runs.push_back(run_megakernel(mk, runs[0].tokens.back(), 20));
    runs.push_back(run_megakernel(mk, runs[1].tokens.back(), 12, filtered, prompt));
    if (!*vectors) {
      reference = runs;
      continue;
    }
    for (size_t i = 0; i < runs.size(); ++i)
      expect_same_bits(runs[i], reference[i], std::string("MEGAQWEN_MK_VECTORS=") + vectors + ", launch " + std::to_string(i));
  }
  expect_refused("MEGAQWEN_MK_VECTORS", {"flag", "1", "COUNTERS"});
}

// The timing probes (MEGAQWEN_MK_PROBE: no input waits, no weights, both) make meaningless tokens on
// purpose, never a broken run: each draws every token asked for, in range, two launches in a row, and
// the engine's decode note says which probe runs. Bad values, and no-waits with flagged vectors (whose
// readers poll the data, not the counters the probe skips), are refused by name.
TEST_F(MegakernelTiny, TimingProbesRunEveryTokenAndSayWhatTheyAre) {
  EXPECT_EQ(cuda::mk::parse_probe("no-waits,no-weights", false), cuda::mk::kProbeAll);
  EXPECT_EQ(cuda::mk::parse_probe("no-weights", true), cuda::mk::kProbeNoWeights);
  const auto prompt = random_ids(30, 31);
  for (const char* probe : {"no-waits", "no-weights", "no-waits,no-weights"}) {
    SCOPED_TRACE(probe);
    cuda::CudaEngine mk = engine_with("MEGAQWEN_MK_PROBE", probe);
    ASSERT_TRUE(mk.uses_megakernel()) << mk.decode_kernel_note();
    EXPECT_EQ(cuda::mk::probe_name(mk.megakernel()->probe()), probe);
    EXPECT_NE(mk.decode_kernel_note().find(std::string("timing probe ") + probe), std::string::npos)
        << mk.decode_kernel_note();
    mk.prefill(prompt);
    const MkRun first = run_megakernel(mk, 321, 16);
    const MkRun second = run_megakernel(mk, first.tokens.back(), 8);
    ASSERT_EQ(first.tokens.size(), 16u);
    ASSERT_EQ(second.tokens.size(), 8u);
    for (const MkRun* run : {&first, &second})
      for (int32_t id : run->tokens) EXPECT_TRUE(id >= 0 && size_t(id) < V()) << id;
    EXPECT_EQ(mk.position(), int(prompt.size()) + 24);
  }
  expect_refused("MEGAQWEN_MK_PROBE", {"no-wait", "no-waits,", "1", "no-weights,nothing"});
  test::ScopedEnv flagged("MEGAQWEN_MK_VECTORS", "flagged");
  expect_refused("MEGAQWEN_MK_PROBE", {"no-waits"});
}

// The one-stage MLP (MEGAQWEN_MK_MLP=one-stage: each CTA's units through gate/up and down^T, summed
// into the residual stream with fixed-point atomics) against the per-operator path and the CPU engine
// (the thresholds of Greedy256MatchesPerOpAndCpu), over two launches in a row (the kernel zeroes each
// token's sums during the token before; the runner only the first token's half); a rerun of the same
// steps gives the same bits, whatever order the atomics landed in, and so does the one-stage MLP with
// flagged vectors (their readers poll xmid, the sums' readers wait on DownDone). Bad values are
// refused by name.
TEST_F(MegakernelTiny, OneStageMlpMatchesPerOpAndCpuBitForBitAcrossRuns) {
  EXPECT_FALSE(cuda::mk::parse_mlp_form("two-stage"));
  EXPECT_TRUE(cuda::mk::parse_mlp_form("one-stage"));
  const auto prompt = random_ids(24, 37);
  cuda::CudaEngine mk = engine_with("MEGAQWEN_MK_MLP", "one-stage");
  ASSERT_TRUE(mk.uses_megakernel()) << mk.decode_kernel_note();
  EXPECT_TRUE(mk.megakernel()->one_stage_mlp());
  EXPECT_NE(mk.decode_kernel_note().find("one-stage MLP"), std::string::npos) << mk.decode_kernel_note();
  cuda::CudaEngine perop(model_, perop_options(512));
  CpuEngine cpu(model_, {.context = 512, .threads = 0});
  const int32_t first = test::argmax(mk.prefill(prompt));
  perop.prefill(prompt);
  cpu.prefill(prompt);
  const int n = std::getenv("MEGAQWEN_TEST_QUICK") ? 8 : 48;
  MkRun run = run_megakernel(mk, first, n);
  const MkRun second = run_megakernel(mk, run.tokens.back(), n);
  ASSERT_EQ(run.tokens.size(), size_t(n));
  ASSERT_EQ(second.tokens.size(), size_t(n));
  run.tokens.insert(run.tokens.end(), second.tokens.begin(), second.tokens.end());
  run.logits.insert(run.logits.end(), second.logits.begin(), second.logits.end());
  for (size_t i = 0; i < run.tokens.size(); ++i)
    ASSERT_EQ(run.tokens[i], test::argmax(row(run.logits, i, V()))) << "step " << i << ": not the argmax of its own logits";
  int hard = 0;
  const double vs_perop = compare_teacher_forced(perop, first, run, V(), &hard);
  EXPECT_LE(vs_perop, kGpuSelfTolerance);
  EXPECT_EQ(hard, 0);
  const double vs_cpu = compare_teacher_forced(cpu, first, run, V(), &hard);
  EXPECT_LE(vs_cpu, kGpuLogitTolerance);
  EXPECT_EQ(hard, 0);
  std::printf("one-stage MLP, tiny: worst logit error vs per-op %.3g, vs cpu %.3g over %d steps\n", vs_perop, vs_cpu,
              2 * n);
  mk.truncate(int(prompt.size()));
  const MkRun again = run_megakernel(mk, first, n);
  const MkRun first_launch{std::vector<int32_t>(run.tokens.begin(), run.tokens.begin() + n),
                           std::vector<float>(run.logits.begin(), run.logits.begin() + std::ptrdiff_t(size_t(n) * V())),
                           {}};
  expect_same_bits(again, first_launch, "the one-stage MLP run again");
  {
    test::ScopedEnv flagged("MEGAQWEN_MK_VECTORS", "flagged");
    cuda::CudaEngine both = engine_with("MEGAQWEN_MK_MLP", "one-stage");
    ASSERT_TRUE(both.megakernel()->one_stage_mlp() && both.megakernel()->flagged_vectors()) << both.decode_kernel_note();
    EXPECT_EQ(test::argmax(both.prefill(prompt)), first);
    expect_same_bits(run_megakernel(both, first, n), first_launch, "the one-stage MLP with flagged vectors, launch 1");
    const MkRun second_launch{std::vector<int32_t>(run.tokens.begin() + n, run.tokens.end()),
                              std::vector<float>(run.logits.begin() + std::ptrdiff_t(size_t(n) * V()), run.logits.end()),
                              {}};
    expect_same_bits(run_megakernel(both, first_launch.tokens.back(), n), second_launch,
                     "the one-stage MLP with flagged vectors, launch 2");
  }
  expect_refused("MEGAQWEN_MK_MLP", {"one", "1", "ONE-STAGE", "two-stage,one-stage"});
}

// The watchdog's seconds (MEGAQWEN_MK_WATCHDOG_S) are read when the engine builds the kernel, so a
// bad value is refused there, by name, instead of silently switching the watchdog off mid-run.
TEST_F(MegakernelTiny, WatchdogSecondsAreCheckedUpFront) {
  expect_refused("MEGAQWEN_MK_WATCHDOG_S", {"abc", "-1", "5s", "nan"});
  cuda::CudaEngine mk = engine_with("MEGAQWEN_MK_WATCHDOG_S", "0");  // off: a valid choice
  mk.prefill(random_ids(8, 43));
  EXPECT_EQ(run_megakernel(mk, 5, 4).tokens.size(), 4u);
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
  const MkRun run = run_megakernel(mk, 500, 32, s, history);
  int same = 0;
  for (size_t i = 0; i < run.tokens.size(); ++i) {
    perop.decode_only(i == 0 ? 500 : run.tokens[i - 1]);
    history.resize(prompt.size() + i);  // the key is the history length, as in Generator
    same += test::device_token(perop, s, history) == run.tokens[i];
  }
  EXPECT_GE(same, 30) << "draws keyed alike from nearly equal logits should agree";
}

// Filtered sampling (top-k with top-p / min-p), nucleus sampling (top-p / min-p without a top-k) and
// the penalties in the kernel draw what the per-operator device sampler draws from the same history
// and key (the two paths share the selection arithmetic): teacher-forced with the
// megakernel's tokens, the per-op path samples each step from its own logits with the history the
// kernel's counts stood for (the given history plus every earlier draw).
TEST_F(MegakernelTiny, FilteredAndPenalizedRunsAgreeWithPerOpDeviceSampling) {
  const auto prompt = random_ids(16, 16);
  const SamplingParams cases[] = {sampling_params(0.6f, 20, 0.95f, 0.0f, 1.0f, 0.0f, 0.0f, 99),   // Qwen3 thinking defaults
                                  sampling_params(0.7f, 20, 0.8f, 0.0f, 1.0f, 1.5f, 0.0f, 99),    // non-thinking + presence
                                  sampling_params(1.0f, 64, 1.0f, 0.05f, 1.3f, 0.0f, 0.5f, 99),   // min-p, rep., frequency
                                  sampling_params(0.0f, 0, 1.0f, 0.0f, 1.3f, 0.2f, 0.2f, 99),     // greedy with penalties
                                  sampling_params(0.9f, 0, 1.0f, 0.0f, 1.1f, 0.0f, 0.0f, 99),     // Gumbel with a penalty
                                  sampling_params(0.7f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 99),     // nucleus: top-p alone
                                  sampling_params(1.5f, 0, 0.95f, 0.02f, 1.2f, 0.3f, 0.0f, 99)};  // nucleus, both cuts
  cuda::CudaEngine mk(model_, mk_options(1024)), perop(model_, perop_options(1024));
  for (const SamplingParams& s : cases) {
    ASSERT_EQ(mk.megakernel_unsupported_reason(s), "");
    mk.truncate(0);
    perop.truncate(0);
    mk.prefill(prompt);
    perop.prefill(prompt);
    std::vector<int32_t> history = prompt;
    history.push_back(500);  // the fed token counts, as in Generator
    const MkRun run = run_megakernel(mk, 500, 32, s, history);
    const std::string what = "T " + std::to_string(s.temperature) + " k " + std::to_string(s.top_k) + " p " +
                             std::to_string(s.top_p) + " min_p " + std::to_string(s.min_p) + " penalties " +
                             std::to_string(s.repetition_penalty) + "/" + std::to_string(s.presence_penalty) + "/" +
                             std::to_string(s.frequency_penalty);
    // Exact: the per-operator sampler on the kernel's own logits draws every token the kernel drew.
    // Teacher-forced on the per-operator engine's logits (within ~2e-5 of the kernel's) draws may
    // still differ where the key lands on a boundary: flat nucleus draws at T 1.5 flipped 3 of 32 on
    // the H200 (2026-11-28), so that comparison only has to agree mostly.
    cuda::DeviceSampler sampler(int(V()), nullptr);
    int same = 0, exact = 0;
    for (size_t i = 0; i < run.tokens.size(); ++i) {
      perop.decode_only(i == 0 ? 500 : run.tokens[i - 1]);
      if (i > 0) history.push_back(run.tokens[i - 1]);
      same += test::device_token(perop, s, history) == run.tokens[i];
      const auto kernel_row = row(run.logits, i, V());
      const auto d = test::upload(std::vector<float>(kernel_row.begin(), kernel_row.end()));
      const std::optional<DeviceDraw> draw = sampler.sample(d.data(), s, history, kNoLogprobs);
      ASSERT_TRUE(draw.has_value()) << what;
      exact += draw->token == run.tokens[i];
    }
    EXPECT_EQ(exact, int(run.tokens.size())) << what;
    EXPECT_GE(same, 24) << what;
  }
  // A top-k wider than the kernel's selection is refused (Generator then takes the per-operator path).
  SamplingParams wide;
  wide.temperature = 0.7f;
  wide.top_k = cuda::mk::kMaxTopK + 1;
  EXPECT_NE(mk.megakernel_unsupported_reason(wide), "");
  EXPECT_FALSE(mk.generate_on_device(1, 4, {}, wide, prompt, kNoLogprobs, [](const DeviceDraw&) { return true; }).has_value());
}

// Log-probabilities in the kernel (logprob.cuh in the LM head stage) equal the host's token_logprob
// on the same step's raw logits (logits_out): the drawn token's and the best alternatives, in every
// selection mode (argmax, Gumbel, filtered, nucleus: each hands the drawn id to the scoring its own
// way), with the draws unchanged by asking. 1e-5: the device's float sums against the host's double.
TEST_F(MegakernelTiny, LogprobsMatchTheStepLogitsInEverySelectionMode) {
  const auto prompt = random_ids(12, 21);
  const SamplingParams cases[] = {greedy_params(),
                                  sampling_params(0.9f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 5),     // Gumbel
                                  sampling_params(0.6f, 20, 0.95f, 0.0f, 1.1f, 0.0f, 0.0f, 5),   // filtered
                                  sampling_params(0.7f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 5)};    // nucleus
  cuda::CudaEngine mk(model_, mk_options(256));
  const int n = kEmulatedDevice ? 6 : 24;
  const std::vector<int> tops = kEmulatedDevice ? std::vector<int>{0, kMaxTopLogprobs} : std::vector<int>{0, 5, kMaxTopLogprobs};
  for (const SamplingParams& s : cases) {
    for (int top : tops) {
      mk.truncate(0);
      mk.prefill(prompt);
      const MkRun plain = run_megakernel(mk, 500, n, s, prompt);
      mk.truncate(0);
      mk.prefill(prompt);
      const MkRun run = run_megakernel(mk, 500, n, s, prompt, top);
      const std::string what = "T " + std::to_string(s.temperature) + " k " + std::to_string(s.top_k) + " p " +
                               std::to_string(s.top_p) + " top " + std::to_string(top);
      EXPECT_EQ(run.tokens, plain.tokens) << what;
      ASSERT_EQ(run.scored.size(), run.tokens.size()) << what;
      for (size_t i = 0; i < run.tokens.size(); ++i) {
        const TokenLogprob want = token_logprob(test::logit_row(run.logits, i, V()), run.tokens[i], top);
        const TokenLogprob& got = run.scored[i];
        EXPECT_EQ(got.token, run.tokens[i]);
        EXPECT_NEAR(got.logprob, want.logprob, 1e-5) << what << " step " << i;
        ASSERT_EQ(got.top.size(), want.top.size()) << what << " step " << i;
        for (size_t k = 0; k < want.top.size(); ++k) {
          EXPECT_EQ(got.top[k].token, want.top[k].token) << what << " step " << i << " rank " << k;
          EXPECT_NEAR(got.top[k].logprob, want.top[k].logprob, 1e-5) << what << " step " << i << " rank " << k;
        }
      }
    }
  }
  EXPECT_NE(mk.megakernel()->logprob_unsupported_reason(kMaxTopLogprobs + 1), "");
}

// Generator with Qwen3's sampling defaults (temperature 0.6, top-k 20, top-p 0.95) and a repetition
// penalty runs on the megakernel and reproduces itself for a fixed seed.
TEST_F(MegakernelTiny, GeneratorSamplesWithQwenDefaultsOnTheKernel) {
  const auto prompt = random_ids(24, 17);
  cuda::CudaEngine mk(model_, mk_options(1024)), perop(model_, perop_options(1024));
  GenerationRequest req;
  req.prompt = prompt;
  req.max_tokens = 48;
  req.sampling.temperature = 0.6f;
  req.sampling.top_k = 20;
  req.sampling.top_p = 0.95f;
  req.sampling.repetition_penalty = 1.05f;
  req.sampling.seed = 7;
  Generator gm(mk), gp(perop);
  const uint64_t launches = mk.megakernel()->launches();
  const auto a = gm.run(req);
  EXPECT_GT(mk.megakernel()->launches(), launches) << "the megakernel did not run";
  ASSERT_EQ(a.tokens.size(), 48u);
  gm.reset();
  const auto b = gm.run(req);
  EXPECT_EQ(a.tokens, b.tokens);
  const auto c = gp.run(req);
  int prefix = 0;
  while (prefix < 48 && a.tokens[size_t(prefix)] == c.tokens[size_t(prefix)]) ++prefix;
  EXPECT_GE(prefix, 24) << "sampled runs of the two paths (same keys) diverge early";
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
  MQ_SKIP_IF_EMULATED("28 layers of Qwen3-0.6B take hours per token");
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
             std::vector<float>(run.logits.begin(), run.logits.begin() + long(24 * V)), {}};
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

// The larger compiled shapes (Qwen3-1.7B, Qwen3-4B: GQA 2 and 4, hidden 2048 / 2560, 36 layers)
// against the per-operator path: 64 greedy steps teacher-forced, deep positions on noise caches, and
// a sampled run with Qwen's defaults. The models are big (3.4 / 8 GB): the test runs when
// MEGAQWEN_TEST_QWEN3_17B / MEGAQWEN_TEST_QWEN3_4B name synthetic folders (scripts/gpu-check.sh,
// stage mk-sizes, writes them) and skips otherwise.
class MegakernelSizes : public ::testing::TestWithParam<const char*> {};

TEST_P(MegakernelSizes, MatchesPerOp) {
  MQ_REQUIRE_GPU_AND_CUBLAS();
  MQ_SKIP_IF_EMULATED("full-size models take hours per token");
  const char* dir = std::getenv(GetParam());
  if (!dir || !*dir) GTEST_SKIP() << GetParam() << " is not set (scripts/gpu-check.sh stage mk-sizes sets it)";
  auto model = load_model(dir);
  MQ_REQUIRE_MEGAKERNEL(model);
  const size_t V = size_t(model->config.vocab_size);
  cuda::CudaEngine mk(model, mk_options(9000)), perop(model, perop_options(9000));
  ASSERT_TRUE(mk.uses_megakernel()) << mk.decode_kernel_note();
  std::printf("%s: %s\n", GetParam(), mk.decode_kernel_note().c_str());
  const auto prompt = random_ids(32, 18);
  const int32_t first = test::argmax(mk.prefill(prompt));
  perop.prefill(prompt);
  const MkRun run = run_megakernel(mk, first, 64);
  int hard = 0;
  const double worst = compare_teacher_forced(perop, first, run, V, &hard);
  EXPECT_LE(worst, kGpuLogitTolerance);
  EXPECT_LE(hard, 1) << "of 64 greedy steps";
  double deep = 0;
  for (int depth : {1000, 8200}) {
    mk.truncate(0);
    perop.truncate(0);
    mk.fill_cache_with_noise(depth);
    perop.fill_cache_with_noise(depth);
    const MkRun r = run_megakernel(mk, 1234, 4);
    int h = 0;
    deep = std::max(deep, compare_teacher_forced(perop, 1234, r, V, &h));
    EXPECT_LE(h, 1) << "depth " << depth;
  }
  EXPECT_LE(deep, kGpuLogitTolerance);
  // Sampling with Qwen's defaults: the same keys draw the same tokens from nearly equal logits.
  SamplingParams s;
  s.temperature = 0.6f;
  s.top_k = 20;
  s.top_p = 0.95f;
  s.seed = 3;
  mk.truncate(0);
  perop.truncate(0);
  mk.prefill(prompt);
  perop.prefill(prompt);
  std::vector<int32_t> history = prompt;
  history.push_back(first);
  const MkRun sampled = run_megakernel(mk, first, 16, s, history);
  int same = 0;
  for (size_t i = 0; i < sampled.tokens.size(); ++i) {
    perop.decode_only(i == 0 ? first : sampled.tokens[i - 1]);
    if (i > 0) history.push_back(sampled.tokens[i - 1]);
    same += test::device_token(perop, s, history) == sampled.tokens[i];
  }
  EXPECT_GE(same, 14);
  std::printf("%s: worst logit error vs per-op %.3g (64 steps), deep %.3g, sampled draws agreeing %d/16\n", GetParam(),
              worst, deep, same);
}

INSTANTIATE_TEST_SUITE_P(Qwen3, MegakernelSizes, ::testing::Values("MEGAQWEN_TEST_QWEN3_17B", "MEGAQWEN_TEST_QWEN3_4B"),
                         [](const auto& info) { return std::string(info.param).substr(std::string("MEGAQWEN_TEST_").size()); });

}  // namespace
}  // namespace megaqwen

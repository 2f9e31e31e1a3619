// Device sampling: the argmax reduction for any block count with the winner planted in every block's
// slice (first and last id) and at both ends, ties to the lowest id, NaN never winning; penalties as
// the CPU Sampler applies them; top-k / top-p / min-p filtering; draws distributed as the CPU
// Sampler's probabilities (checked by frequency over many keyed draws).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "megaqwen/cuda/kernels.h"
#include "megaqwen/sampling/sampler.h"

namespace megaqwen {
namespace {

using namespace test;

int32_t device_argmax(const cuda::DeviceBuffer<float>& logits, int V, int blocks, const cuda::LogitTransform& t = {}) {
  cuda::DeviceBuffer<uint64_t> partial(static_cast<size_t>(cuda::kArgmaxMaxBlocks));
  cuda::DeviceBuffer<int32_t> out(1);
  CUDA_CHECK(cudaMemset(out.data(), 0xff, 4));
  cuda::argmax(logits.data(), V, t, blocks, partial.data(), out.data(), nullptr);
  return download(out)[0];
}

void set_value(cuda::DeviceBuffer<float>& d, int i, float v) {
  CUDA_CHECK(cudaMemcpy(d.data() + i, &v, sizeof v, cudaMemcpyHostToDevice));
}

TEST(CudaSampling, ArgmaxWinnerInEveryBlockSliceAndAtTheEdges) {
  MQ_REQUIRE_GPU();
  // Emulated: no full vocabulary, and the winner in the first two, a middle and the last two slices.
  const std::vector<int> vocabs =
      kEmulatedDevice ? std::vector<int>{1, 31, 1000, 4097} : std::vector<int>{1, 31, 1000, 4097, 151936};
  for (int V : vocabs) {
    const auto base = random_floats(size_t(V), uint64_t(V), -10, 10);
    auto d = upload(base);
    for (int blocks : {1, 3, 7, 64, cuda::argmax_blocks(V), 1000, cuda::kArgmaxMaxBlocks}) {
      EXPECT_EQ(device_argmax(d, V, blocks), argmax(base)) << "V " << V << " blocks " << blocks;
      const std::vector<int> spots = slice_edge_ids(V, blocks);
      for (int at : spots) {
        set_value(d, at, 100.0f);
        ASSERT_EQ(device_argmax(d, V, blocks), at) << "V " << V << " blocks " << blocks << " winner at " << at;
        set_value(d, at, base[size_t(at)]);
      }
    }
  }
}

TEST(CudaSampling, ArgmaxTiesPickTheLowestIdAndNanNeverWins) {
  MQ_REQUIRE_GPU();
  const int V = kEmulatedDevice ? 4097 : 151936;
  auto base = random_floats(size_t(V), 42, -10, 10);
  auto d = upload(base);
  for (int blocks : {1, 5, cuda::argmax_blocks(V), cuda::kArgmaxMaxBlocks}) {
    for (auto [a, b] : {std::pair{5, V - 1936}, std::pair{V / 2, V / 2 + 1}, std::pair{0, V - 1}}) {
      set_value(d, b, 50.0f);
      set_value(d, a, 50.0f);
      EXPECT_EQ(device_argmax(d, V, blocks), a) << "tie " << a << "/" << b << " blocks " << blocks;
      set_value(d, a, base[size_t(a)]);
      set_value(d, b, base[size_t(b)]);
    }
    set_value(d, 1234, NAN);
    EXPECT_EQ(device_argmax(d, V, blocks), argmax(base)) << "NaN won, blocks " << blocks;
    set_value(d, 1234, base[1234]);
  }
  std::vector<float> all_nan(100, NAN);
  auto dn = upload(all_nan);
  EXPECT_EQ(device_argmax(dn, 100, 3), 0);
}

// Greedy with penalties: the device applies them as Sampler does, so the choice is the same. The
// history repeats the largest logits (the top id 4 times, the next ones once and twice) among 300
// spread ids, so every case moves the winner away from the raw argmax, and the last case picks
// another id than a penalty counted once per distinct token would (both checked first, so the test
// cannot pass with a kernel that ignores penalties or counts).
TEST(CudaSampling, GreedyWithPenaltiesMatchesCpuSampler) {
  MQ_REQUIRE_GPU();
  const int V = 5000;
  const auto logits = random_floats(size_t(V), 9, -3, 3);
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[size_t(a)] > logits[size_t(b)]; });
  std::vector<int32_t> history = {order[0], order[0], order[0], order[0], order[1], order[2], order[2]};
  for (int i = 0; i < 300; ++i) history.push_back(int32_t((i * 7919) % V));
  std::vector<int32_t> counts(static_cast<size_t>(V), 0);
  for (int32_t id : history) ++counts[size_t(id)];
  std::vector<int32_t> distinct;  // each seen id once
  for (int i = 0; i < V; ++i)
    if (counts[size_t(i)] > 0) distinct.push_back(i);
  auto dl = upload(logits);
  auto dc = upload(counts);
  // A frequency penalty of 0.6 x the top id's lead over the best id never seen: counted once, the top
  // id stays ahead; counted 4 times (its occurrences), it falls behind.
  int32_t best_unseen = 0;
  while (counts[size_t(order[size_t(best_unseen)])] > 0) ++best_unseen;
  const float lead = logits[size_t(order[0])] - logits[size_t(order[size_t(best_unseen)])];
  for (auto [rep, pres, freq] : {std::tuple{1.3f, 0.0f, 0.0f}, std::tuple{1.0f, 0.5f, 0.2f},
                                 std::tuple{0.8f, -0.5f, 0.1f}, std::tuple{1.0f, 0.0f, 0.6f * lead}}) {
    SCOPED_TRACE(testing::Message() << "repetition " << rep << ", presence " << pres << ", frequency " << freq);
    SamplingParams p;
    p.temperature = 0;
    p.repetition_penalty = rep;
    p.presence_penalty = pres;
    p.frequency_penalty = freq;
    std::vector<float> copy = logits;
    const int32_t want = Sampler(p).sample(copy, history);
    ASSERT_NE(want, order[0]) << "the penalties do not change the winner: the case tests nothing";
    if (freq > 0 && pres == 0 && rep == 1) {
      copy = logits;
      ASSERT_NE(Sampler(p).sample(copy, distinct), want) << "counts do not matter here: the case tests nothing";
    }
    cuda::LogitTransform t;
    t.counts = dc.data();
    t.repetition_penalty = rep;
    t.presence_penalty = pres;
    t.frequency_penalty = freq;
    EXPECT_EQ(device_argmax(dl, V, cuda::argmax_blocks(V), t), want);
  }
}

int32_t device_filtered(const cuda::DeviceBuffer<float>& logits, int V, const cuda::LogitTransform& t,
                        const cuda::FilterParams& f) {
  cuda::DeviceBuffer<float> scratch(static_cast<size_t>(V));
  cuda::DeviceBuffer<int32_t> out(1);
  CUDA_CHECK(cudaMemset(out.data(), 0xff, 4));
  cuda::sample_filtered(logits.data(), V, t, f, scratch.data(), out.data(), nullptr);
  return download(out)[0];
}

TEST(CudaSampling, FilteredDrawsStayInsideTheFilter) {
  MQ_REQUIRE_GPU();
  const int V = kEmulatedDevice ? 4097 : 151936;
  const auto logits = random_floats(size_t(V), 77, -8, 8);
  auto d = upload(logits);
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[size_t(a)] > logits[size_t(b)]; });
  for (uint64_t step = 0; step < (kEmulatedDevice ? 8 : 50); ++step) {
    cuda::LogitTransform t;
    t.temperature = 0.7f;
    t.seed = 3;
    t.step = step;
    // top_k = 1 is greedy.
    EXPECT_EQ(device_filtered(d, V, t, {1, 1.0f, 0.0f}), order[0]);
    // top_k = 20: one of the 20 largest.
    const int32_t id = device_filtered(d, V, t, {20, 1.0f, 0.0f});
    EXPECT_TRUE(std::find(order.begin(), order.begin() + 20, id) != order.begin() + 20) << id;
    // A tiny top_p keeps only the top token; min_p = 1 likewise.
    EXPECT_EQ(device_filtered(d, V, t, {0, 1e-6f, 0.0f}), order[0]);
    EXPECT_EQ(device_filtered(d, V, t, {50, 1.0f, 1.0f}), order[0]);
  }
}

// Frequencies of many keyed draws against the CPU Sampler's probabilities (computed the same way:
// temperature, top-k, softmax over the kept set, top-p prefix, min-p floor): each id within 5 of its
// own standard errors sqrt(p (1 - p) / draws) plus 1e-3, so rare ids are held as tightly as common
// ones, and an id the filters drop is never drawn. 20,000 draws per case (the emulated device: 2,500).
// Plain draws (Gumbel-max, no filter) at T = 1 and at T = 0.6.
std::vector<double> cpu_probabilities(const std::vector<float>& logits, float temperature, int top_k, float top_p,
                                      float min_p) {
  const size_t V = logits.size();
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[size_t(a)] > logits[size_t(b)]; });
  size_t keep = top_k > 0 ? std::min(V, size_t(top_k)) : V;
  std::vector<double> p(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i)
    total += (p[i] = std::exp(double(logits[size_t(order[i])] / temperature - logits[size_t(order[0])] / temperature)));
  for (double& x : p) x /= total;
  if (top_p < 1) {
    double mass = 0;
    size_t n = 0;
    while (n < keep) {
      mass += p[n++];
      if (mass >= top_p) break;
    }
    keep = n;
  }
  if (min_p > 0) {
    size_t n = 1;
    while (n < keep && p[n] >= min_p * p[0]) ++n;
    keep = n;
  }
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += p[i];
  std::vector<double> out(V, 0.0);
  for (size_t i = 0; i < keep; ++i) out[size_t(order[i])] = p[i] / mass;
  return out;
}

TEST(CudaSampling, DrawFrequenciesMatchTheCpuProbabilities) {
  MQ_REQUIRE_GPU();
  const int V = 40;
  const auto logits = random_floats(size_t(V), 5, -2, 2);
  auto d = upload(logits);
  struct Case {
    float temperature;
    int top_k;
    float top_p, min_p;
  };
  for (const Case& c : {Case{1.0f, 0, 1.0f, 0.0f}, Case{0.6f, 0, 1.0f, 0.0f}, Case{0.7f, 10, 1.0f, 0.0f}, Case{1.0f, 0, 0.8f, 0.0f},
                        Case{1.3f, 20, 0.9f, 0.1f}, Case{0.9f, 0, 1.0f, 0.05f}, Case{1.2f, 0, 0.9f, 0.02f}}) {
    const auto want = cpu_probabilities(logits, c.temperature, c.top_k, c.top_p, c.min_p);
    const bool plain = c.top_k == 0 && c.top_p >= 1 && c.min_p <= 0;
    std::vector<double> freq(static_cast<size_t>(V), 0.0);
    const int draws = kEmulatedDevice ? 2500 : 20000;
    // Buffers allocated once: 20,000 draws x 4 cases with a cudaMalloc/cudaFree per draw (as the
    // device_argmax / device_filtered helpers do) would spend most of this test in the allocator.
    cuda::DeviceBuffer<uint64_t> partial(static_cast<size_t>(cuda::kArgmaxMaxBlocks));
    cuda::DeviceBuffer<float> scratch(static_cast<size_t>(V));
    cuda::DeviceBuffer<int32_t> out(1);
    for (int s = 0; s < draws; ++s) {
      cuda::LogitTransform t;
      t.temperature = c.temperature;
      t.seed = 11;
      t.step = uint64_t(s);
      CUDA_CHECK(cudaMemset(out.data(), 0xff, 4));  // -1: a draw that writes nothing fails below
      if (plain) {
        t.gumbel = true;
        cuda::argmax(d.data(), V, t, 2, partial.data(), out.data(), nullptr);
      } else {
        cuda::sample_filtered(d.data(), V, t, {c.top_k, c.top_p, c.min_p}, scratch.data(), out.data(), nullptr);
      }
      int32_t id = -1;
      CUDA_CHECK(cudaMemcpy(&id, out.data(), sizeof id, cudaMemcpyDeviceToHost));  // legacy stream: waits for the draw
      ASSERT_GE(id, 0);
      ASSERT_LT(id, V);
      freq[size_t(id)] += 1.0 / draws;
    }
    for (int i = 0; i < V; ++i) {
      const double p = want[size_t(i)], tolerance = 5 * std::sqrt(p * (1 - p) / draws) + 1e-3;
      EXPECT_NEAR(freq[size_t(i)], p, tolerance) << "id " << i << " T " << c.temperature << " k " << c.top_k
                                                 << " p " << c.top_p << " min_p " << c.min_p;
      if (want[size_t(i)] == 0.0) {
        EXPECT_EQ(freq[size_t(i)], 0.0) << "filtered id " << i << " was drawn";
      }
    }
  }
}

// Nucleus sampling over Qwen3's whole vocabulary with a flat distribution: top-p 0.9 keeps most of the
// 151,936 ids (a sampler that drew from the top 1,024 only would never leave them). Every draw must
// lie in the CPU Sampler's kept set (fp32 against fp64 exp can move the cut by an id or two: at most
// 1% of the draws may fall just outside), and the share of draws outside the top 1,024 must match the
// Sampler's mass there within 5 standard errors. 1,000 draws (emulated: 60).
TEST(CudaSampling, NucleusDrawsFromTheWholeTopPSet) {
  MQ_REQUIRE_GPU();
  const int V = 151936, draws = kEmulatedDevice ? 60 : 1000;
  const auto logits = random_floats(size_t(V), 21, -3, 3);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 0.9f;
  std::vector<float> work = logits;
  const auto dist = Sampler(p).distribution(work, {});
  ASSERT_GT(dist.size(), size_t(50000)) << "a flat distribution keeps most of the vocabulary";
  std::vector<int> rank(size_t(V), -1);
  for (size_t j = 0; j < dist.size(); ++j) rank[size_t(dist[j].id)] = int(j);
  double mass_outside = 0;
  for (size_t j = 1024; j < dist.size(); ++j) mass_outside += dist[j].prob;
  auto d = upload(logits);
  cuda::DeviceBuffer<float> scratch(static_cast<size_t>(V));
  cuda::DeviceBuffer<int32_t> out(1);
  int outside_top = 0, outside_kept = 0;
  for (int s = 0; s < draws; ++s) {
    cuda::LogitTransform t;
    t.temperature = p.temperature;
    t.seed = 17;
    t.step = uint64_t(s);
    CUDA_CHECK(cudaMemset(out.data(), 0xff, 4));
    cuda::sample_filtered(d.data(), V, t, {0, p.top_p, 0.0f}, scratch.data(), out.data(), nullptr);
    int32_t id = -1;
    CUDA_CHECK(cudaMemcpy(&id, out.data(), sizeof id, cudaMemcpyDeviceToHost));
    ASSERT_GE(id, 0);
    ASSERT_LT(id, V);
    outside_kept += rank[size_t(id)] < 0;
    outside_top += rank[size_t(id)] >= 1024;
  }
  EXPECT_LE(outside_kept, draws / 100) << "draws outside the Sampler's top-p set";
  const double freq = double(outside_top) / draws, sd = std::sqrt(mass_outside * (1 - mass_outside) / draws);
  EXPECT_NEAR(freq, mass_outside, 5 * sd + 1e-3) << "share of draws outside the top 1,024";
}

// The nucleus sampler's fixed point holds V * 2^45 below 2^63: a larger vocabulary is refused with
// its size, not summed into garbage (the engine samples those on the host).
TEST(CudaSampling, NucleusRefusesAVocabularyBeyondItsFixedPoint) {
  MQ_REQUIRE_GPU();
  const int V = cuda::kNucleusMaxVocab;
  cuda::DeviceBuffer<float> logits(static_cast<size_t>(V)), scratch(static_cast<size_t>(V));
  cuda::DeviceBuffer<int32_t> out(1);
  cuda::LogitTransform t;
  try {
    cuda::sample_filtered(logits.data(), V, t, {0, 0.9f, 0.0f}, scratch.data(), out.data(), nullptr);
    ADD_FAILURE() << "a vocabulary of " << V << " ids was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(V)), std::string::npos) << e.what();
  }
}

TEST(CudaSampling, CounterUniformIsKeyedAndInRange) {
  double sum = 0;
  for (uint32_t i = 0; i < 100000; ++i) {
    const double u = cuda::counter_uniform(1, 2, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.01);
  EXPECT_NE(cuda::counter_uniform(1, 2, 3), cuda::counter_uniform(1, 3, 3));
  EXPECT_NE(cuda::counter_uniform(1, 2, 3), cuda::counter_uniform(2, 2, 3));
}

}  // namespace
}  // namespace megaqwen

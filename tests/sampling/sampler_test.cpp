// Sampler: each filter and penalty against hand-computed expectations, and the draw against the
// softmax distribution it should follow (a statistical check with a fixed seed and a stated bound).
#include "megaqwen/sampling/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "megaqwen/util/error.h"
#include "test_paths.h"

namespace megaqwen {
namespace {

std::map<int32_t, int> histogram(const SamplingParams& p, const std::vector<float>& logits, int draws,
                                 const std::vector<int32_t>& history = {}) {
  Sampler s(p);
  std::map<int32_t, int> h;
  for (int i = 0; i < draws; ++i) {
    std::vector<float> l = logits;
    ++h[s.sample(l, history)];
  }
  return h;
}

TEST(Sampler, ArgmaxPicksLowestIdOnTies) {
  std::vector<float> v = {1.0f, 3.0f, 3.0f, -2.0f};
  EXPECT_EQ(argmax(v), 1);
  std::vector<float> w = {5.0f};
  EXPECT_EQ(argmax(w), 0);
}

TEST(Sampler, GreedyIsArgmaxWhateverTheSeed) {
  std::vector<float> logits = {0.1f, 2.0f, 1.9f, -1.0f};
  for (uint64_t seed : {0ull, 1ull, 99ull}) {
    SamplingParams p;
    p.temperature = 0;
    p.seed = seed;
    Sampler s(p);
    std::vector<float> l = logits;
    EXPECT_EQ(s.sample(l, {}), 1);
  }
}

TEST(Sampler, TemperatureDrawFollowsSoftmax) {
  // 40000 draws: each token within 5 of its own standard errors sqrt(p (1 - p) / 40000), so the rare
  // token 3 (p ~ 0.0097) is held as tightly as the common ones.
  std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f};
  SamplingParams p;
  p.temperature = 0.7f;
  p.seed = 1234;
  const int draws = 40000;
  auto h = histogram(p, logits, draws);
  double z = 0;
  for (float l : logits) z += std::exp(l / 0.7);
  for (int i = 0; i < 5; ++i) {
    const double want = std::exp(logits[size_t(i)] / 0.7) / z;
    EXPECT_NEAR(double(h[i]) / draws, want, 5 * std::sqrt(want * (1 - want) / draws)) << "token " << i;
  }
}

TEST(Sampler, TopKKeepsOnlyTheKBest) {
  std::vector<float> logits = {3.0f, 1.0f, 2.9f, 0.5f, 2.8f};
  SamplingParams p;
  p.top_k = 2;
  p.seed = 5;
  auto h = histogram(p, logits, 5000);
  EXPECT_EQ(std::set<int32_t>({0, 2}), [&] { std::set<int32_t> s; for (auto& [id, n] : h) s.insert(id); return s; }());
  p.top_k = 1;
  auto one = histogram(p, logits, 200);
  EXPECT_EQ(one.size(), 1u);
  EXPECT_EQ(one.begin()->first, 0);
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  // probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.75 keeps {0, 1} (0.5 < 0.75 <= 0.8).
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p;
  p.top_p = 0.75f;
  p.seed = 9;
  const int draws = 20000;
  auto h = histogram(p, logits, draws);
  EXPECT_EQ(h.count(2) + h.count(3), 0u);
  EXPECT_NEAR(double(h[0]) / draws, 0.5 / 0.8, 0.015);
  p.top_p = 0.4f;  // the top token alone reaches it
  EXPECT_EQ(histogram(p, logits, 300).size(), 1u);
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheTop) {
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p;
  p.min_p = 0.25f;  // floor 0.125: keeps 0.5, 0.3, 0.15
  p.seed = 3;
  auto h = histogram(p, logits, 20000);
  EXPECT_EQ(h.count(3), 0u);
  EXPECT_GT(h[2], 0);
}

// distribution() is what sample() draws from: hand-computed for a case with every stage on, and
// matched by the frequencies of sample() with the same parameters.
TEST(Sampler, DistributionIsWhatSampleDrawsFrom) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 3.0f, -1.0f, 0.9f};
  const std::vector<int32_t> history = {3, 3, 5};
  SamplingParams p;
  p.temperature = 0.5f;
  p.top_k = 4;
  p.top_p = 0.97f;
  p.min_p = 0.01f;
  p.repetition_penalty = 1.5f;  // id 3: 3 / 1.5 = 2; id 5: 0.9 / 1.5 = 0.6
  p.presence_penalty = 0.1f;    // id 3: 2 - 0.1 - 0.2 * 2 = 1.5; id 5: 0.6 - 0.1 - 0.2 = 0.3
  p.frequency_penalty = 0.2f;
  // After penalties: {2, 1, 0.5, 1.5, -1, 0.3}; top 4: ids 0 (2), 3 (1.5), 1 (1), 2 (0.5); / T = 4, 3, 2, 1.
  double e[4] = {1.0, std::exp(-1.0), std::exp(-2.0), std::exp(-3.0)}, z = e[0] + e[1] + e[2] + e[3];
  // Cumulative mass: 0.644, 0.881, 0.968, 1: top_p 0.97 keeps all four; min_p 0.01 x 0.644 keeps all.
  Sampler s(p);
  std::vector<float> l = logits;
  const auto d = s.distribution(l, history);
  ASSERT_EQ(d.size(), 4u);
  const int32_t ids[4] = {0, 3, 1, 2};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(d[size_t(i)].id, ids[i]);
    EXPECT_NEAR(d[size_t(i)].prob, e[i] / z, 1e-6);
  }
  p.top_p = 0.95f;  // now the prefix of three reaches it: renormalized over three
  Sampler s3(p);
  l = logits;
  const auto d3 = s3.distribution(l, history);
  ASSERT_EQ(d3.size(), 3u);
  EXPECT_NEAR(d3[0].prob, e[0] / (e[0] + e[1] + e[2]), 1e-6);
  // 40,000 draws: standard error below 0.0025 per id, 0.01 is a 4-sigma bound.
  const int draws = 40000;
  auto h = histogram(p, logits, draws, history);
  for (const auto& c : d3) EXPECT_NEAR(double(h[c.id]) / draws, c.prob, 0.01) << "id " << c.id;
  EXPECT_EQ(h.count(2) + h.count(4) + h.count(5), 0u);
  // Greedy: the argmax after penalties, alone.
  p.temperature = 0;
  Sampler g(p);
  l = logits;
  const auto dg = g.distribution(l, history);
  ASSERT_EQ(dg.size(), 1u);
  EXPECT_EQ(dg[0].id, 0);
  EXPECT_EQ(dg[0].prob, 1.0);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  std::vector<float> l = {4.0f, 3.0f, -1.0f, 1.0f};
  std::vector<int32_t> history = {0, 2, 0};
  EXPECT_EQ(s.sample(l, history), 1);  // 4 -> 2 falls below 3
  EXPECT_FLOAT_EQ(l[0], 2.0f);
  EXPECT_FLOAT_EQ(l[2], -2.0f);
  EXPECT_FLOAT_EQ(l[3], 1.0f);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesSubtractPerToken) {
  SamplingParams p;
  p.temperature = 0;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p);
  std::vector<float> l = {1.0f, 1.0f, 1.0f};
  std::vector<int32_t> history = {1, 1, 1, 2};
  s.sample(l, history);
  EXPECT_FLOAT_EQ(l[0], 1.0f);
  EXPECT_FLOAT_EQ(l[1], 1.0f - 0.5f - 0.75f);
  EXPECT_FLOAT_EQ(l[2], 1.0f - 0.5f - 0.25f);
}

TEST(Sampler, SameSeedSameStreamOtherSeedOtherStream) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(i % 7) * 0.3f;
  auto run = [&](uint64_t seed) {
    SamplingParams p;
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      std::vector<float> l = logits;
      out.push_back(s.sample(l, {}));
    }
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, RejectsInvalidParameters) {
  auto bad = [](auto mutate, const char* field) {
    SamplingParams p;
    mutate(p);
    try {
      Sampler s(p);
      ADD_FAILURE() << "accepted a bad " << field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  bad([](SamplingParams& p) { p.temperature = -1; }, "temperature");
  bad([](SamplingParams& p) { p.temperature = NAN; }, "temperature");
  bad([](SamplingParams& p) { p.top_p = 0; }, "top_p");
  bad([](SamplingParams& p) { p.top_p = 1.5f; }, "top_p");
  bad([](SamplingParams& p) { p.top_k = -3; }, "top_k");
  bad([](SamplingParams& p) { p.min_p = 2; }, "min_p");
  bad([](SamplingParams& p) { p.repetition_penalty = 0; }, "repetition_penalty");
  bad([](SamplingParams& p) { p.presence_penalty = 5; }, "presence_penalty");
}

TEST(Sampler, DefaultsFromQwen3GenerationConfig) {
  GenerationDefaults d = load_generation_defaults(test::qwen3_tokenizer_dir());
  EXPECT_FLOAT_EQ(d.sampling.temperature, 0.6f);
  EXPECT_EQ(d.sampling.top_k, 20);
  EXPECT_FLOAT_EQ(d.sampling.top_p, 0.95f);
  EXPECT_EQ(d.eos_token_ids, (std::vector<int32_t>{151645, 151643}));
}

TEST(Sampler, MissingGenerationConfigMeansPlainSampling) {
  GenerationDefaults d = load_generation_defaults("/nonexistent-folder");
  EXPECT_FLOAT_EQ(d.sampling.temperature, 1.0f);
  EXPECT_TRUE(d.eos_token_ids.empty());
}

}  // namespace
}  // namespace megaqwen

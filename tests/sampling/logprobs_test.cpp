// token_logprob: log_softmax against a direct computation, the top list's order and ties, logits
// far from zero, and the refusals.
#include "megaqwen/sampling/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

TEST(Logprobs, MatchesLogSoftmax) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> logits(1000);
  for (float& x : logits) x = normal(rng);
  double z = 0;
  for (float x : logits) z += std::exp(double(x));
  for (int32_t token : {0, 17, 999}) {
    const TokenLogprob lp = token_logprob(logits, token, 0);
    EXPECT_EQ(lp.token, token);
    EXPECT_NEAR(lp.logprob, double(logits[size_t(token)]) - std::log(z), 1e-5);
    EXPECT_TRUE(lp.top.empty());
  }
  // The probabilities of the top list and of the token agree, and all of them sum to 1.
  double total = 0;
  for (int32_t t = 0; t < 1000; ++t) total += std::exp(double(token_logprob(logits, t, 0).logprob));
  EXPECT_NEAR(total, 1.0, 1e-5);
}

TEST(Logprobs, TopIsSortedBestFirstLowestIdOnTies) {
  const std::vector<float> logits = {1.0f, 5.0f, 3.0f, 5.0f, -2.0f, 3.0f, 4.0f};
  const TokenLogprob lp = token_logprob(logits, 4, 5);
  ASSERT_EQ(lp.top.size(), 5u);
  const int32_t want[] = {1, 3, 6, 2, 5};
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(lp.top[i].token, want[i]) << i;
  EXPECT_EQ(lp.top[0].logprob, lp.top[1].logprob);
  EXPECT_GT(lp.top[1].logprob, lp.top[2].logprob);
  EXPECT_FLOAT_EQ(lp.top[2].logprob, token_logprob(logits, 6, 0).logprob);
  EXPECT_LT(lp.logprob, lp.top.back().logprob);  // token 4 is the least likely
  // More alternatives asked for than the vocabulary has: all of them.
  EXPECT_EQ(token_logprob(logits, 0, kMaxTopLogprobs).top.size(), logits.size());
}

TEST(Logprobs, LargeLogitsDoNotOverflow) {
  const std::vector<float> logits = {1000.0f, 999.0f, -1000.0f};
  const TokenLogprob lp = token_logprob(logits, 1, 2);
  const double log_z = 1000.0 + std::log(1.0 + std::exp(-1.0));
  EXPECT_NEAR(lp.logprob, 999.0 - log_z, 1e-4);
  EXPECT_NEAR(lp.top[0].logprob, 1000.0 - log_z, 1e-4);
  EXPECT_TRUE(std::isfinite(token_logprob(logits, 2, 0).logprob));
}

TEST(Logprobs, RefusesBadArguments) {
  const std::vector<float> logits = {0.0f, 1.0f};
  EXPECT_THROW(token_logprob(logits, 2, 0), Error);
  EXPECT_THROW(token_logprob(logits, -1, 0), Error);
  EXPECT_THROW(token_logprob(logits, 0, -1), Error);
  EXPECT_THROW(token_logprob(logits, 0, kMaxTopLogprobs + 1), Error);
  EXPECT_THROW(token_logprob({}, 0, 0), Error);
}

}  // namespace
}  // namespace megaqwen

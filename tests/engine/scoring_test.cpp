// perplexity(): against the negative log-likelihoods computed directly from one fresh prefill per
// window on the CPU engine (fixture gqa2_bf16), its windowing and its refusals.
#include "megaqwen/engine/scoring.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/hf_fixture.h"
#include "megaqwen/engine/cpu_engine.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

class PerplexityTest : public test::EngineWorkloadTest<CpuEngine> {
 protected:
  static void SetUpTestSuite() { w_ = test::load_engine_workload(test::hf_fixtures_dir() / "gqa2_bf16"); }

  // -log softmax(row)[token], in double.
  static double nll(std::span<const float> row, int32_t token) {
    const double max = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (float x : row) sum += std::exp(double(x) - max);
    return -(double(row[size_t(token)]) - max - std::log(sum));
  }
};

TEST_F(PerplexityTest, ScoresTheSecondHalfOfEachWindowFromAnEmptyCache) {
  constexpr int kWindow = 16;
  ASSERT_GE(ids_.size(), 70u);  // four whole windows and a tail of 6 that is left out
  CpuEngine e = engine();
  e.prefill(std::span(ids_).first(5));  // whatever the cache held before does not matter
  std::vector<int> progress;
  const PerplexityReport r =
      perplexity(e, ids_, {.window = kWindow}, [&](int k, const PerplexityReport& so_far) {
        progress.push_back(k);
        EXPECT_EQ(so_far.windows, k + 1);
      });
  EXPECT_EQ(progress, (std::vector<int>{0, 1, 2, 3}));
  ASSERT_EQ(r.windows, 4);
  EXPECT_EQ(r.scored_tokens, 4 * 7);  // positions 8 .. 14 predict tokens 9 .. 15
  EXPECT_EQ(e.position(), 0);

  double sum = 0;
  std::vector<double> all;
  for (int k = 0; k < 4; ++k) {
    const auto w = std::span(ids_).subspan(size_t(k * kWindow), kWindow);
    CpuEngine fresh = engine();
    const std::vector<float> logits = test::prefill_logits(fresh, w);
    double window_sum = 0;
    for (size_t i = kWindow / 2; i + 1 < size_t(kWindow); ++i) {
      const double x = nll(row(logits, i), w[i + 1]);
      window_sum += x;
      all.push_back(x);
    }
    EXPECT_NEAR(r.per_window[size_t(k)].nll_sum, window_sum, 1e-4) << "window " << k;
    EXPECT_EQ(r.per_window[size_t(k)].scored, 7);
    sum += window_sum;
  }
  const double mean = sum / double(all.size());
  double var = 0;
  for (double x : all) var += (x - mean) * (x - mean);
  var /= double(all.size() - 1);
  EXPECT_NEAR(r.mean_nll, mean, 1e-5);
  EXPECT_NEAR(r.perplexity, std::exp(mean), 1e-4 * std::exp(mean));
  EXPECT_NEAR(r.nll_stderr, std::sqrt(var / double(all.size())), 1e-5);
  EXPECT_NEAR(r.perplexity_stderr, r.perplexity * r.nll_stderr, 1e-9);
  // A random model is far from certain: the vocabulary's uniform perplexity is the scale.
  EXPECT_GT(r.perplexity, 1.0);

  const PerplexityReport two = perplexity(e, ids_, {.window = kWindow, .max_windows = 2});
  EXPECT_EQ(two.windows, 2);
  EXPECT_NEAR(two.per_window[1].nll_sum, r.per_window[1].nll_sum, 1e-9);
}

TEST_F(PerplexityTest, RefusesWhatCannotBeMeasured) {
  CpuEngine e = engine(2, 64);
  EXPECT_THROW(perplexity(e, ids_, {.window = 3}), Error);
  EXPECT_THROW(perplexity(e, ids_, {.window = 65}), Error);  // over the context
  EXPECT_THROW(perplexity(e, std::span(ids_).first(20), {.window = 32}), Error);  // no whole window
  EXPECT_THROW(perplexity(e, ids_, {.window = 16, .max_windows = -1}), Error);
}

}  // namespace
}  // namespace megaqwen

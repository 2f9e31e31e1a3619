// RoPE frequencies against transformers': for real Qwen3 shapes with no scaling, YaRN (defaults, and
// mscale / beta / untruncated ramp) and linear scaling, rope_inverse_frequencies and the parsed
// attention factor equal what modeling_rope_utils computes (tests/fixtures/hf/rope_frequencies.json,
// made by tools/make_hf_fixtures.py from the same config.json text parsed here).
#include "megaqwen/model/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace megaqwen {
namespace {

nlohmann::json rope_table() {
  std::ifstream in(test::fixtures_dir() / "hf" / "rope_frequencies.json");
  return nlohmann::json::parse(in);
}

TEST(Rope, FrequenciesAndAttentionFactorMatchTransformers) {
  const nlohmann::json table = rope_table();
  ASSERT_EQ(table["configs"].size(), 4u);
  for (const auto& [name, entry] : table["configs"].items()) {
    SCOPED_TRACE(name);
    const ModelConfig c = parse_model_config(entry["config"].dump(), name);
    const std::vector<float> got = rope_inverse_frequencies(c);
    const std::vector<float> want = entry["inv_freq"].get<std::vector<float>>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      // fp32 as transformers computes it; pow may round differently in the last place.
      EXPECT_NEAR(got[i], want[i], 2e-7f * std::abs(want[i])) << "dim pair " << i;
    }
    EXPECT_NEAR(c.rope_scaling.type == RopeScaling::Type::Yarn ? c.rope_scaling.attention_factor : 1.0,
                entry["attention_factor"].get<double>(), 1e-12);
  }
}

TEST(Rope, YarnKeepsHighFrequenciesAndInterpolatesLowOnes) {
  const nlohmann::json table = rope_table();
  const ModelConfig plain = parse_model_config(table["configs"]["qwen3_default"]["config"].dump(), "plain");
  const ModelConfig yarn = parse_model_config(table["configs"]["qwen3_yarn4"]["config"].dump(), "yarn");
  const auto a = rope_inverse_frequencies(plain), b = rope_inverse_frequencies(yarn);
  EXPECT_EQ(a.front(), b.front());                       // turns many times within the original context
  EXPECT_FLOAT_EQ(b.back(), a.back() / 4.0f);            // turns less than once: interpolated by the factor
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(b[i], a[i]);
}

}  // namespace
}  // namespace megaqwen

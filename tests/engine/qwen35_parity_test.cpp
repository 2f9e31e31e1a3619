// The Qwen3.5 fixtures load as transformers saved them (their logits and greedy runs are checked with
// the Qwen3 ones in hf_parity_test.cpp). tests/fixtures/hf_qwen35: small random Qwen3.5 checkpoints (layer patterns [L, F], [L, L, F],
// [F, L, L, F]; the published wrapper layout with a vision tower and text-only ones; grouped value
// heads; untied head; A_log and the gated norm in float32) with transformers' fp32 logits (its torch
// Gated DeltaNet) and greedy continuations. See tests/fixtures/hf_qwen35/README.md and
// tools/make_hf_fixtures_qwen35.py.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/hf_fixture.h"
#include "megaqwen/engine/cpu_qwen35_engine.h"
#include "megaqwen/engine/create_engine.h"
#include "megaqwen/model/model.h"

namespace megaqwen {
namespace {

using test::hf_qwen35_fixtures_dir;

class Qwen35Parity : public ::testing::TestWithParam<std::string> {
 protected:
  std::filesystem::path dir() const { return hf_qwen35_fixtures_dir() / GetParam(); }
};

TEST(Qwen35Fixtures, AllCasesPresent) {
  // tools/make_hf_fixtures_qwen35.py makes 3 cases; fewer means they are missing or were not regenerated.
  EXPECT_GE(test::fixture_cases(hf_qwen35_fixtures_dir()).size(), 3u) << "in " << hf_qwen35_fixtures_dir();
}

// The checkpoint binds as transformers saved it: the layer pattern, the name prefix of its class, the
// float32 tensors, and a vision tower that is counted but not bound.
TEST_P(Qwen35Parity, LoadsAsSaved) {
  const nlohmann::json expected = test::read_json(dir() / "expected.json");
  std::shared_ptr<const Model> model = load_model(dir().string());
  ASSERT_TRUE(model->config.is_hybrid());
  ASSERT_TRUE(model->qwen35.has_value());
  const Qwen35Weights& w = *model->qwen35;
  const auto types = expected.at("layer_types").get<std::vector<std::string>>();
  ASSERT_EQ(model->config.layer_types.size(), types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    EXPECT_EQ(layer_type_name(model->config.layer_types[i]), types[i]) << "layer " << i;
    EXPECT_EQ(w.layers[i].type, model->config.layer_types[i]);
    if (w.layers[i].type == LayerType::LinearAttention) {
      EXPECT_EQ(w.layers[i].linear.A_log.dtype, DType::F32);
      EXPECT_EQ(w.layers[i].linear.norm.dtype, DType::F32);
      EXPECT_EQ(w.layers[i].linear.in_qkv.dtype, DType::BF16);
    }
  }
  const bool wrapper = expected.at("architecture") == "Qwen3_5ForConditionalGeneration";
  EXPECT_EQ(w.prefix, wrapper ? "model.language_model." : "model.");
  EXPECT_EQ(model->config.model_type, wrapper ? "qwen3_5" : "qwen3_5_text");
  EXPECT_EQ(w.vision_tensors, expected.at("visual_tensors").get<int>());
  EXPECT_EQ(w.vision_bytes > 0, w.vision_tensors > 0);
  // create_engine picks the hybrid engine for a Qwen3.5 model.
  auto engine = create_engine(model, {.device = "cpu", .context = 64, .threads = 1, .quiet = true});
  EXPECT_NE(dynamic_cast<CpuHybridEngine*>(engine.get()), nullptr);
}

std::string case_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen35Parity, ::testing::ValuesIn(test::fixture_cases(hf_qwen35_fixtures_dir())),
                         case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Qwen35Parity);

}  // namespace
}  // namespace megaqwen

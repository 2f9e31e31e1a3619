// Parity of the CPU hybrid engine with Hugging Face transformers on the fixtures in
// tests/fixtures/hf_qwen35: small random Qwen3.5 checkpoints (layer patterns [L, F], [L, L, F],
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
using test::kLogitTolerance;

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

// Every sequence: prefill ids[:prefill_len] in one call (all logits), then decode the rest one token
// at a time; each position's logits must match transformers' whole-sequence forward within
// kLogitTolerance (transformers itself: chunked vs recurrent ~1e-6, recorded in expected.json).
TEST_P(Qwen35Parity, LogitsMatchTransformers) {
  const nlohmann::json expected = test::read_json(dir() / "expected.json");
  std::shared_ptr<const Model> model = load_model(dir().string());
  const int V = model->config.vocab_size;
  ASSERT_EQ(V, expected.at("vocab_size").get<int>());

  double worst = 0;
  std::string worst_where;
  for (const nlohmann::json& seq : expected.at("sequences")) {
    const std::vector<int32_t> ids = seq.at("ids").get<std::vector<int32_t>>();
    const size_t prefill_len = seq.at("prefill_len").get<size_t>();
    const std::vector<float> ref = test::read_f32_file(dir() / seq.at("logits_file").get<std::string>());
    ASSERT_EQ(ref.size(), ids.size() * size_t(V)) << seq.at("logits_file");
    ASSERT_GE(prefill_len, 1u);
    ASSERT_LE(prefill_len, ids.size());

    CpuHybridEngine engine(model, {.context = 256, .threads = 2});
    std::vector<float> prefill_logits;
    engine.prefill_all_logits(std::span(ids).first(prefill_len), prefill_logits);
    ASSERT_EQ(prefill_logits.size(), prefill_len * size_t(V));
    ASSERT_EQ(engine.position(), int(prefill_len));

    for (size_t pos = 0; pos < ids.size(); ++pos) {
      std::span<const float> actual;
      if (pos < prefill_len) {
        actual = std::span<const float>(prefill_logits).subspan(pos * size_t(V), size_t(V));
      } else {
        actual = engine.decode(ids[pos]);
        ASSERT_EQ(actual.size(), size_t(V));
      }
      const double err = test::relative_max_error(actual, std::span(ref).subspan(pos * size_t(V), size_t(V)));
      const std::string where = "sequence of " + std::to_string(ids.size()) + " (prefill " +
                                std::to_string(prefill_len) + "), position " + std::to_string(pos) +
                                (pos < prefill_len ? " [prefill]" : " [decode]");
      EXPECT_LE(err, kLogitTolerance) << GetParam() << ": " << where;
      if (err > worst || worst_where.empty()) worst = err, worst_where = where;
    }
    EXPECT_EQ(engine.position(), int(ids.size()));
  }
  std::cout << "[ worst    ] " << GetParam() << ": max|a-b|/max|b| = " << worst << " at " << worst_where << "\n";
  RecordProperty("worst_relative_error", std::to_string(worst));
}

// Greedy decoding (argmax, lowest id on ties) from the prompt reproduces transformers' generate(),
// which prefills with the chunked delta rule and decodes with the recurrent one.
TEST_P(Qwen35Parity, GreedyMatchesGenerate) {
  const nlohmann::json expected = test::read_json(dir() / "expected.json");
  const std::vector<int32_t> prompt = expected.at("greedy").at("prompt").get<std::vector<int32_t>>();
  const std::vector<int32_t> want = expected.at("greedy").at("tokens").get<std::vector<int32_t>>();
  ASSERT_EQ(want.size(), 32u);

  CpuHybridEngine engine(load_model(dir().string()), {.context = 256, .threads = 2});
  std::vector<int32_t> got;
  std::span<const float> logits = engine.prefill(prompt);
  while (got.size() < want.size()) {
    got.push_back(test::argmax(logits));
    if (got.size() < want.size()) logits = engine.decode(got.back());
  }
  EXPECT_EQ(got, want) << GetParam();
}

std::string case_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen35Parity, ::testing::ValuesIn(test::fixture_cases(hf_qwen35_fixtures_dir())),
                         case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Qwen35Parity);

}  // namespace
}  // namespace megaqwen

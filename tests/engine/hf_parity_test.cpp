// Parity of the CPU engine with Hugging Face transformers on the fixtures in tests/fixtures/hf:
// small random Qwen3 checkpoints (GQA 1/2/4, tied and untied heads, head_dim != hidden/heads, sharded,
// bf16/f16/f32, rope_theta 1e6 and 1e4) with transformers' fp32 logits and greedy continuations.
// See tests/fixtures/hf/README.md and tools/make_hf_fixtures.py.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/hf_fixture.h"
#include "megaqwen/engine/cpu_engine.h"
#include "megaqwen/model/model.h"

namespace megaqwen {
namespace {

using test::hf_fixtures_dir;
using test::kLogitTolerance;

class HfParity : public ::testing::TestWithParam<std::string> {
 protected:
  std::filesystem::path dir() const { return hf_fixtures_dir() / GetParam(); }
};

TEST(HfFixtures, AllCasesPresent) {
  // tools/make_hf_fixtures.py makes 8 cases; fewer means the fixtures are missing or were not regenerated.
  EXPECT_GE(test::hf_fixture_cases().size(), 8u) << "in " << hf_fixtures_dir();
}

// Every sequence: prefill ids[:prefill_len] in one call (all logits), then decode the rest one token at a
// time; each position's logits must match transformers' full forward within kLogitTolerance.
TEST_P(HfParity, LogitsMatchTransformers) {
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

    CpuEngine engine(model, {.context = 256, .threads = 2});
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

// Greedy decoding (argmax, lowest id on ties) from the prompt reproduces transformers' generate().
TEST_P(HfParity, GreedyMatchesGenerate) {
  const nlohmann::json expected = test::read_json(dir() / "expected.json");
  const std::vector<int32_t> prompt = expected.at("greedy").at("prompt").get<std::vector<int32_t>>();
  const std::vector<int32_t> want = expected.at("greedy").at("tokens").get<std::vector<int32_t>>();
  ASSERT_EQ(want.size(), 32u);

  CpuEngine engine(load_model(dir().string()), {.context = 256, .threads = 2});
  std::vector<int32_t> got;
  std::span<const float> logits = engine.prefill(prompt);
  while (got.size() < want.size()) {
    got.push_back(test::argmax(logits));
    if (got.size() < want.size()) logits = engine.decode(got.back());
  }
  EXPECT_EQ(got, want) << GetParam();
}

std::string case_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(Fixtures, HfParity, ::testing::ValuesIn(test::hf_fixture_cases()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HfParity);

}  // namespace
}  // namespace megaqwen

// Parity of the CPU engines with Hugging Face transformers, one test body for every fixture:
// - tests/fixtures/hf: small random Qwen3 checkpoints (GQA 1/2/4, tied and untied heads,
//   head_dim != hidden/heads, sharded, bf16/f16/f32, rope_theta 1e6 and 1e4), tools/make_hf_fixtures.py;
// - tests/fixtures/hf_qwen35: small random Qwen3.5 hybrids (layer patterns [L, F], [L, L, F],
//   [F, L, L, F], wrapper and text-only layouts), tools/make_hf_fixtures_qwen35.py;
// each with transformers' fp32 logits and greedy continuations. create_engine picks the engine that
// runs the model's architecture on the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/hf_fixture.h"
#include "megaqwen/engine/create_engine.h"
#include "megaqwen/model/model.h"

namespace megaqwen {
namespace {

using test::hf_fixtures_dir;
using test::kLogitTolerance;

// Parameter: a case folder relative to tests/fixtures, e.g. "hf/gqa1_bf16".
class HfParity : public ::testing::TestWithParam<std::string> {
 protected:
  std::filesystem::path dir() const { return test::fixtures_dir() / GetParam(); }
  static std::unique_ptr<Engine> cpu_engine(std::shared_ptr<const Model> model) {
    return create_engine(std::move(model), {.device = "cpu", .context = 256, .threads = 2, .quiet = true});
  }
};

std::vector<std::string> all_cases() {
  std::vector<std::string> cases;
  for (const auto& c : test::fixture_cases(hf_fixtures_dir())) cases.push_back("hf/" + c);
  for (const auto& c : test::fixture_cases(test::hf_qwen35_fixtures_dir())) cases.push_back("hf_qwen35/" + c);
  return cases;
}

TEST(HfFixtures, AllCasesPresent) {
  // tools/make_hf_fixtures.py makes 10 cases; fewer means the fixtures are missing or were not regenerated.
  EXPECT_GE(test::hf_fixture_cases().size(), 10u) << "in " << hf_fixtures_dir();
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

    auto engine_ptr = cpu_engine(model);
    Engine& engine = *engine_ptr;
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

  auto engine = cpu_engine(load_model(dir().string()));
  std::vector<int32_t> got;
  std::span<const float> logits = engine->prefill(prompt);
  while (got.size() < want.size()) {
    got.push_back(test::argmax(logits));
    if (got.size() < want.size()) logits = engine->decode(got.back());
  }
  EXPECT_EQ(got, want) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfParity, ::testing::ValuesIn(all_cases()), test::fixture_case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HfParity);

}  // namespace
}  // namespace megaqwen

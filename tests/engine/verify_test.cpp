// verify_engine (src/megaqwen/engine/verify.h): the per-position metrics on hand-made logits, a CPU
// engine passing against itself (Qwen3 and the hybrid), and candidates that must fail: the same
// weights with a wrong RoPE base (a structural bug), one planted wrong top-1, non-finite logits.
#include "megaqwen/engine/verify.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "engine/hf_fixture.h"
#include "megaqwen/engine/create_engine.h"
#include "megaqwen/sampling/sampler.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

TEST(CompareLogits, IdenticalLogitsHaveNoError) {
  const std::vector<float> r = {0.5f, -1.0f, 3.0f, 2.0f};
  const LogitComparison c = compare_logits(r, r);
  EXPECT_EQ(c.rel_error, 0.0);
  EXPECT_EQ(c.kl, 0.0);
  EXPECT_EQ(c.ref_top1, 2);
  EXPECT_EQ(c.cand_top1, 2);
  EXPECT_TRUE(c.finite);
}

TEST(CompareLogits, AConstantShiftKeepsTheDistribution) {
  const std::vector<float> r = {0.5f, -1.0f, 3.0f, 2.0f};
  std::vector<float> s = r;
  for (float& x : s) x += 0.25f;
  const LogitComparison c = compare_logits(r, s);
  EXPECT_NEAR(c.rel_error, 0.25 / 3.0, 1e-7);
  EXPECT_NEAR(c.max_abs, 0.25, 1e-7);
  EXPECT_LT(c.kl, 1e-12);  // softmax is shift-invariant
}

TEST(CompareLogits, KlMatchesTheClosedForm) {
  // Two ids: p = softmax(0, 0) = (1/2, 1/2), q = softmax(0, log 3) = (1/4, 3/4):
  // KL(p || q) = 1/2 log 2 + 1/2 log(2/3).
  const std::vector<float> r = {0.0f, 0.0f}, s = {0.0f, float(std::log(3.0))};
  EXPECT_NEAR(compare_logits(r, s).kl, 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-7);
}

TEST(CompareLogits, TheGapIsTheReferencesPreferenceForItsTop1) {
  const std::vector<float> r = {1.00f, 0.99f, -2.0f};
  const LogitComparison c = compare_logits(r, std::vector<float>{0.994f, 0.996f, -2.0f});
  EXPECT_EQ(c.ref_top1, 0);
  EXPECT_EQ(c.cand_top1, 1);
  EXPECT_NEAR(c.ref_gap, 0.01, 1e-6);
  EXPECT_NEAR(c.max_abs, 0.006, 1e-6);
  EXPECT_EQ(compare_logits(r, r).ref_gap, 0.0);
}

TEST(CompareLogits, NonFiniteAndMismatchedInputs) {
  const std::vector<float> r = {1.0f, 2.0f};
  EXPECT_FALSE(compare_logits(r, std::vector<float>{1.0f, std::numeric_limits<float>::quiet_NaN()}).finite);
  EXPECT_FALSE(compare_logits(r, std::vector<float>{std::numeric_limits<float>::infinity(), 2.0f}).finite);
  EXPECT_THROW(compare_logits(r, std::vector<float>{1.0f}), Error);
  EXPECT_THROW(compare_logits(std::vector<float>{}, std::vector<float>{}), Error);
}

// An engine that hands out another engine's results, with its decode logits changed by `tamper`
// (given the position the logits predict from): the faulty kernels verify must catch.
class TamperedEngine : public Engine {
 public:
  using Tamper = std::function<void(int position, std::vector<float>& logits)>;
  TamperedEngine(std::unique_ptr<Engine> inner, Tamper tamper) : inner_(std::move(inner)), tamper_(std::move(tamper)) {}
  const ModelConfig& config() const override { return inner_->config(); }
  std::string device_name() const override { return "tampered " + inner_->device_name(); }
  int context_size() const override { return inner_->context_size(); }
  int position() const override { return inner_->position(); }
  std::span<const float> prefill(std::span<const int32_t> tokens) override { return inner_->prefill(tokens); }
  void prefill_all_logits(std::span<const int32_t> tokens, std::vector<float>& out) override {
    inner_->prefill_all_logits(tokens, out);
  }
  std::span<const float> decode(int32_t token) override {
    const auto out = inner_->decode(token);
    logits_.assign(out.begin(), out.end());
    tamper_(inner_->position() - 1, logits_);
    return logits_;
  }
  void truncate(int n) override { inner_->truncate(n); }
  void fill_cache_with_noise(int n) override { inner_->fill_cache_with_noise(n); }
  uint64_t kv_bytes_per_token() const override { return inner_->kv_bytes_per_token(); }

 private:
  std::unique_ptr<Engine> inner_;
  Tamper tamper_;
  std::vector<float> logits_;
};

class VerifyEngine : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { w_ = test::load_engine_workload(test::fixtures_dir() / GetParam()); }
  std::unique_ptr<Engine> cpu(std::shared_ptr<const Model> model = nullptr) const {
    return create_engine(model ? model : w_.model, {.device = "cpu", .context = 128, .threads = 2, .quiet = true});
  }
  // The workload's 70 ids: 50 prefilled, 20 decoded, then 24 generated.
  VerifyOptions options() const {
    VerifyOptions o;
    o.tokens = w_.ids;
    o.prefill_tokens = 50;
    o.generate_tokens = 24;
    return o;
  }
  test::EngineWorkload w_;
};

TEST_P(VerifyEngine, TheCpuEnginePassesAgainstItself) {
  auto reference = cpu(), candidate = cpu();
  const VerifyReport r = verify_engine(*reference, *candidate, options());
  EXPECT_TRUE(r.passed()) << ::testing::PrintToString(r.failures);
  ASSERT_EQ(r.phases.size(), 3u);
  EXPECT_EQ(r.phases[0].name, "prefill");
  EXPECT_EQ(r.phases[0].positions, 50);
  EXPECT_EQ(r.phases[1].name, "decode");
  EXPECT_EQ(r.phases[1].positions, 20);
  EXPECT_EQ(r.phases[2].name, "generation");
  EXPECT_EQ(r.phases[2].positions, 24);
  EXPECT_EQ(r.generated.size(), 24u);
  // Both sides run the CPU engine in fp32; batch sizes and decode change only the summation order.
  EXPECT_LE(r.phases[0].worst_rel_error, test::kLogitTolerance);
  EXPECT_LE(r.phases[1].worst_rel_error, test::kLogitTolerance);
  for (const PhaseResult& p : r.phases) {
    EXPECT_EQ(p.agree, p.positions) << p.name;
    EXPECT_LT(p.max_kl, 1e-9) << p.name;
  }
  // The engines hold the sequence (the candidate: up to its last generated token, not appended).
  EXPECT_EQ(candidate->position(), 70 + 24 - 1);
}

TEST_P(VerifyEngine, OnePlantedWrongTop1FailsItsPhase) {
  auto reference = cpu();
  const int planted = 60;  // a decode position
  TamperedEngine candidate(cpu(), [&](int position, std::vector<float>& logits) {
    if (position != planted) return;
    const int32_t best = argmax(logits);
    logits[size_t((best + 7) % int(logits.size()))] = logits[size_t(best)] + 5.0f;
  });
  const VerifyReport r = verify_engine(*reference, candidate, options());
  EXPECT_FALSE(r.passed());
  const PhaseResult& decode = r.phases.at(1);
  EXPECT_EQ(decode.agree, 19);
  EXPECT_EQ(decode.near_ties, 0);
  ASSERT_EQ(decode.mismatches.size(), 1u);
  EXPECT_NE(decode.mismatches[0].find("position 60"), std::string::npos) << decode.mismatches[0];
  EXPECT_EQ(decode.worst_position, planted);
}

TEST_P(VerifyEngine, SmallNoiseWithinTheBoundsPasses) {
  // Logit noise of ~1e-4 relative, below the bf16 KV cache's ~1e-3: must not be called a failure.
  auto reference = cpu();
  TamperedEngine candidate(cpu(), [](int position, std::vector<float>& logits) {
    for (size_t i = 0; i < logits.size(); ++i) logits[i] *= 1.0f + 1e-4f * float(((i + size_t(position)) % 3)) - 1e-4f;
  });
  const VerifyReport r = verify_engine(*reference, candidate, options());
  EXPECT_TRUE(r.passed()) << ::testing::PrintToString(r.failures);
  EXPECT_GT(r.phases.at(1).worst_rel_error, 0.0);
}

TEST_P(VerifyEngine, NonFiniteLogitsFail) {
  auto reference = cpu();
  TamperedEngine candidate(cpu(), [](int position, std::vector<float>& logits) {
    if (position == 55) logits[3] = std::numeric_limits<float>::quiet_NaN();
  });
  const VerifyReport r = verify_engine(*reference, candidate, options());
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.phases.at(1).non_finite, 1);
}

TEST_P(VerifyEngine, BadOptionsAreErrors) {
  auto a = cpu(), b = cpu();
  VerifyOptions o = options();
  o.prefill_tokens = 0;
  EXPECT_THROW(verify_engine(*a, *b, o), Error);
  o = options();
  o.generate_tokens = 100;  // 70 + 100 > the context of 128
  try {
    verify_engine(*a, *b, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context of 170"), std::string::npos) << e.what();
  }
  o = options();
  o.tokens.clear();
  EXPECT_THROW(verify_engine(*a, *b, o), Error);
}

INSTANTIATE_TEST_SUITE_P(Engines, VerifyEngine,
                         ::testing::Values("hf/gqa2_bf16", "hf_qwen35/fllf_text_bf16"), test::fixture_case_name);

// An engine with no model: the logits predicting from position p are script(p) (vocabulary 4).
class ScriptedEngine : public Engine {
 public:
  using Script = std::function<std::vector<float>(int position)>;
  explicit ScriptedEngine(Script script) : script_(std::move(script)) {
    config_.vocab_size = 4;
    config_.max_position_embeddings = 64;
  }
  const ModelConfig& config() const override { return config_; }
  std::string device_name() const override { return "scripted"; }
  int context_size() const override { return 64; }
  int position() const override { return position_; }
  std::span<const float> prefill(std::span<const int32_t> tokens) override {
    position_ += int(tokens.size());
    logits_ = script_(position_ - 1);
    return logits_;
  }
  void prefill_all_logits(std::span<const int32_t> tokens, std::vector<float>& out) override {
    out.clear();
    for (size_t i = 0; i < tokens.size(); ++i) {
      const auto l = script_(position_++);
      out.insert(out.end(), l.begin(), l.end());
    }
  }
  std::span<const float> decode(int32_t token) override { return prefill(std::span(&token, 1)); }
  void truncate(int n) override { position_ = n; }
  void fill_cache_with_noise(int n) override { position_ = n; }
  uint64_t kv_bytes_per_token() const override { return 0; }

 private:
  Script script_;
  ModelConfig config_;
  int position_ = 0;
  std::vector<float> logits_;
};

// The near-tie rule: a flip is forgiven only when the reference's gap is within twice the typical
// (median) error. Reference at every position: id 0 leads id 1 by 0.5, except at position 3 where it
// leads by 0.005. The candidate adds +-0.01 everywhere; at 3 it flips ids 0 and 1 by that much (a
// true near-tie); at 6 it flips them with an error of 0.6 seen nowhere else (a real mismatch, though
// within twice that position's own error, which is why the rule uses the median).
TEST(VerifyNearTies, AFlipIsForgivenOnlyWithinTheTypicalError) {
  auto reference_logits = [](int p) {
    return std::vector<float>{1.0f, p == 3 ? 0.995f : 0.5f, -1.0f, -2.0f};
  };
  ScriptedEngine reference(reference_logits);
  ScriptedEngine candidate([&](int p) {
    std::vector<float> l = reference_logits(p);
    for (size_t i = 0; i < l.size(); ++i) l[i] += (i + size_t(p)) % 2 ? 0.01f : -0.01f;
    if (p == 3) l[1] = l[0] + 0.001f;
    if (p == 6) l[1] = l[0] + 0.1f;
    return l;
  });
  VerifyOptions o;
  o.tokens = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1};
  o.prefill_tokens = 5;
  const VerifyReport r = verify_engine(reference, candidate, o);
  EXPECT_NEAR(r.phases[0].tie_tolerance, 0.02, 1e-6);
  EXPECT_NEAR(r.phases[1].tie_tolerance, 0.02, 1e-6);
  ASSERT_EQ(r.phases.size(), 2u);
  EXPECT_EQ(r.phases[0].near_ties, 1);  // position 3
  EXPECT_EQ(r.phases[0].agree, 4);
  EXPECT_EQ(r.phases[1].agree, 4);
  ASSERT_EQ(r.phases[1].mismatches.size(), 1u);
  EXPECT_NE(r.phases[1].mismatches[0].find("position 6"), std::string::npos) << r.phases[1].mismatches[0];
  EXPECT_FALSE(r.passed());
}

// The same weights with RoPE's base changed tenfold: the kind of structural bug (a wrong frequency,
// pairing or position) a kernel can have. Every phase must show it: top-1 mismatches, and in the
// logit phases an error and a KL above the bounds.
TEST(VerifyStructuralBug, AWrongRopeBaseFails) {
  const auto dir = test::fixtures_dir() / "hf/gqa2_bf16";
  const test::EngineWorkload w = test::load_engine_workload(dir);
  auto wrong = std::const_pointer_cast<Model>(load_model(dir.string()));
  wrong->config.rope_theta *= 10;
  auto reference = create_engine(w.model, {.device = "cpu", .context = 128, .threads = 2, .quiet = true});
  auto candidate = create_engine(wrong, {.device = "cpu", .context = 128, .threads = 2, .quiet = true});
  VerifyOptions o;
  o.tokens = w.ids;
  o.prefill_tokens = 50;
  o.generate_tokens = 8;
  const VerifyReport r = verify_engine(*reference, *candidate, o);
  EXPECT_FALSE(r.passed());
  ASSERT_EQ(r.phases.size(), 3u);
  for (const PhaseResult& p : r.phases) {
    EXPECT_FALSE(p.mismatches.empty()) << p.name << ": no top-1 disagreement beyond the near-ties ";
    if (p.name == "generation") continue;
    EXPECT_GT(p.worst_rel_error, 2e-2) << p.name;
    EXPECT_GT(p.max_kl, 2e-2) << p.name;
  }
}

}  // namespace
}  // namespace megaqwen

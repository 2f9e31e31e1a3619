// Behaviour of the CPU engine of its own on one fixture model (tests/fixtures/hf/gqa2_bf16: 3 layers,
// GQA 2): truncate; and, on synthetic models, that weights in huge pages change no logit. What every
// engine does (prefill/decode consistency, chunked prefill, errors that leave the engine usable,
// determinism across thread counts) is in engine_contract_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/hf_fixture.h"
#include "megaqwen/engine/cpu_amx_matmul.h"
#include "megaqwen/engine/cpu_engine.h"
#include "megaqwen/engine/create_engine.h"
#include "megaqwen/engine/generator.h"
#include "megaqwen/model/model.h"
#include "megaqwen/model/synth.h"
#include "megaqwen/util/error.h"
#include "megaqwen/util/huge_pages.h"
#include "model/model_test_util.h"

namespace megaqwen {
namespace {

using test::kLogitTolerance;
using test::relative_max_error;

class CpuEngineTest : public test::EngineWorkloadTest<CpuEngine> {
 protected:
  static void SetUpTestSuite() { w_ = test::load_engine_workload(test::hf_fixtures_dir() / "gqa2_bf16"); }
};

TEST_F(CpuEngineTest, FixtureLoaded) {
  ASSERT_GE(ids_.size(), 64u);
  EXPECT_EQ(model_->config.num_heads / model_->config.num_kv_heads, 2);
}

// truncate(n) rolls back: re-decoding the same tokens from n reproduces the same logits exactly (same
// cache contents, same code path), and a different continuation after truncate matches a fresh engine.
TEST_F(CpuEngineTest, TruncateThenRedecodeReproducesLogits) {
  CpuEngine engine(model_, {.context = 256, .threads = 2});
  engine.prefill(std::span(ids_).first(20));
  std::vector<std::vector<float>> first;
  for (size_t pos = 20; pos < 40; ++pos) {
    auto l = engine.decode(ids_[pos]);
    first.emplace_back(l.begin(), l.end());
  }
  ASSERT_EQ(engine.position(), 40);

  engine.truncate(25);
  EXPECT_EQ(engine.position(), 25);
  for (size_t pos = 25; pos < 40; ++pos) {
    auto l = engine.decode(ids_[pos]);
    ASSERT_EQ(std::vector<float>(l.begin(), l.end()), first[pos - 20]) << "position " << pos;
  }

  // Roll back into the prefilled part and continue with other tokens: same as a fresh engine.
  engine.truncate(10);
  EXPECT_EQ(engine.position(), 10);
  const std::vector<int32_t> other = {3, 1, 4, 1, 5, 9, 2, 6};
  std::vector<float> after_truncate;
  engine.prefill_all_logits(other, after_truncate);

  CpuEngine fresh(model_, {.context = 256, .threads = 2});
  fresh.prefill(std::span(ids_).first(10));
  std::vector<float> reference;
  fresh.prefill_all_logits(other, reference);
  for (size_t i = 0; i < other.size(); ++i)
    EXPECT_LE(relative_max_error(row(after_truncate, i), row(reference, i)), kLogitTolerance) << "token " << i;

  // truncate(0) empties the cache; the whole sequence then matches a fresh prefill.
  engine.truncate(0);
  EXPECT_EQ(engine.position(), 0);
  std::vector<float> again;
  engine.prefill_all_logits(ids_, again);
  const std::vector<float> whole = whole_prefill();
  for (size_t pos = 0; pos < ids_.size(); ++pos)
    EXPECT_LE(relative_max_error(row(again, pos), row(whole, pos)), kLogitTolerance) << "position " << pos;

  // Out-of-range truncation is refused and changes nothing.
  const int before = engine.position();
  EXPECT_THROW(engine.truncate(before + 1), Error);
  EXPECT_THROW(engine.truncate(-1), Error);
  EXPECT_EQ(engine.position(), before);
}

// log_softmax of a logit row, in double.
std::vector<double> log_softmax(std::span<const float> row) {
  const double max = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (float x : row) sum += std::exp(double(x) - max);
  std::vector<double> out;
  for (float x : row) out.push_back(double(x) - max - std::log(sum));
  return out;
}

// Generator's logprobs on a real model: the prompt's are log_softmax of one whole prefill's logits,
// each generated token's is log_softmax of the logits it was drawn from, and asking for logprobs
// changes no token.
TEST_F(CpuEngineTest, GeneratorLogprobsAreLogSoftmaxOfTheLogits) {
  const std::vector<int32_t> prompt(ids_.begin(), ids_.begin() + 40);
  const std::vector<float> whole = whole_prefill();
  CpuEngine e = engine();
  Generator g(e);
  GenerationRequest req;
  req.prompt = prompt;
  req.max_tokens = 12;
  req.sampling.temperature = 0;
  const GenerationResult plain = g.run(req);
  req.logprobs = 5;
  req.prompt_logprobs = true;
  const GenerationResult scored = g.run(req);
  EXPECT_EQ(scored.tokens, plain.tokens);
  ASSERT_EQ(scored.prompt_logprobs.size(), prompt.size() - 1);
  // The same engine's logits, blocked differently (the scoring prefill's blocks, single decode steps):
  // they differ by summation order only, measured 2.2e-6 at most in log-probability; 1e-4 leaves room
  // while a wrong row (an off-by-one between a position and the token it predicts) is off by ~1.
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    const std::vector<double> want = log_softmax(row(whole, i));
    const TokenLogprob& lp = scored.prompt_logprobs[i];
    EXPECT_EQ(lp.token, prompt[i + 1]);
    EXPECT_NEAR(lp.logprob, want[size_t(prompt[i + 1])], 1e-4) << "position " << i;
    ASSERT_EQ(lp.top.size(), 5u);
    EXPECT_EQ(lp.top[0].token, test::argmax(row(whole, i))) << "position " << i;
    EXPECT_NEAR(lp.top[0].logprob, *std::max_element(want.begin(), want.end()), 1e-4);
  }
  // Greedy tokens are the argmax: each token's log-probability is the best of its position, and the
  // sequence scored afresh gives the same numbers.
  ASSERT_EQ(scored.logprobs.size(), scored.tokens.size());
  std::vector<int32_t> sequence = prompt;
  sequence.insert(sequence.end(), scored.tokens.begin(), scored.tokens.end());
  CpuEngine check = engine();
  const std::vector<float> all = test::prefill_logits(check, sequence);
  for (size_t k = 0; k < scored.tokens.size(); ++k) {
    const TokenLogprob& lp = scored.logprobs[k];
    EXPECT_EQ(lp.token, scored.tokens[k]);
    EXPECT_EQ(lp.top[0].token, lp.token);
    EXPECT_FLOAT_EQ(lp.top[0].logprob, lp.logprob);
    const std::vector<double> want = log_softmax(row(all, prompt.size() - 1 + k));
    EXPECT_NEAR(lp.logprob, want[size_t(lp.token)], 1e-4) << "token " << k;
  }
}

// Every token's logits are computed alone (matmul rows in a fixed k order, its own attention row),
// so how a long prompt is cut into calls, and the engine's 512-token chunks within a call, change
// nothing, bit for bit.
TEST_F(CpuEngineTest, LongPromptLogitsDoNotDependOnHowItIsCut) {
  std::vector<int32_t> prompt;
  while (prompt.size() < 1000) prompt.insert(prompt.end(), ids_.begin(), ids_.end());
  prompt.resize(1000);
  CpuEngine whole(model_, {.context = 1024, .threads = 2});
  std::vector<float> at_once;
  whole.prefill_all_logits(prompt, at_once);

  CpuEngine pieces(model_, {.context = 1024, .threads = 1});
  std::vector<float> cut;
  size_t begin = 0;
  for (size_t n : {size_t(300), size_t(400), size_t(300)}) {
    std::vector<float> part;
    pieces.prefill_all_logits(std::span(prompt).subspan(begin, n), part);
    cut.insert(cut.end(), part.begin(), part.end());
    begin += n;
  }
  ASSERT_EQ(cut.size(), at_once.size());
  for (size_t pos = 0; pos < prompt.size(); ++pos) {
    const std::span<const float> a = row(cut, pos), b = row(at_once, pos);
    ASSERT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << "position " << pos;
  }
}

// bf16_matmul_inputs (the reference for the CUDA prefill's bf16-only GEMM inputs) rounds what every
// matrix product sees: the logits move, by about what 2^-9 relative input rounding explains.
TEST_F(CpuEngineTest, Bf16MatmulInputsRoundEveryProductInput) {
  const auto prompt = std::span(ids_).first(32);
  CpuEngine plain(model_, {.context = 64, .threads = 2});
  CpuEngine rounded(model_, {.context = 64, .threads = 2, .bf16_matmul_inputs = true});
  std::vector<float> a, b;
  plain.prefill_all_logits(prompt, a);
  rounded.prefill_all_logits(prompt, b);
  double worst = 0;
  for (size_t pos = 0; pos < prompt.size(); ++pos) worst = std::max(worst, relative_max_error(row(b, pos), row(a, pos)));
  EXPECT_GT(worst, 1e-5) << "the option changed nothing";
  EXPECT_LT(worst, 3e-2);
}

// amx_prefill (--amx-prefill) multiplies prefill's products on AMX with the input split into bf16
// hi + lo (~16 significant bits): its logits lie near the fp32 engine's, far nearer than those of
// bf16_matmul_inputs (one rounding to bf16), and decode (one token: the fp32 GEMV) is untouched.
// Without AMX the option changes nothing at all.
TEST_F(CpuEngineTest, AmxPrefillStaysNearTheFp32Logits) {
  const auto prompt = std::span(ids_).first(40);
  CpuEngine plain(model_, {.context = 64, .threads = 2});
  CpuEngine amx(model_, {.context = 64, .threads = 2, .amx_prefill = true});
  std::vector<float> a, b;
  plain.prefill_all_logits(prompt, a);
  amx.prefill_all_logits(prompt, b);
  std::string why;
  if (!cpu::amx_available(&why)) {
    EXPECT_EQ(amx.device_name(), plain.device_name());
    ASSERT_EQ(a, b) << "without AMX the option must change nothing";
    GTEST_SKIP() << why;
  }
  EXPECT_NE(amx.device_name().find("prefill on AMX"), std::string::npos) << amx.device_name();
  CpuEngine rounded(model_, {.context = 64, .threads = 2, .bf16_matmul_inputs = true});
  std::vector<float> c;
  rounded.prefill_all_logits(prompt, c);
  double amx_error = 0, rounded_error = 0;
  for (size_t pos = 0; pos < prompt.size(); ++pos) {
    amx_error = std::max(amx_error, relative_max_error(row(b, pos), row(a, pos)));
    rounded_error = std::max(rounded_error, relative_max_error(row(c, pos), row(a, pos)));
  }
  EXPECT_GT(amx_error, 0.0) << "the AMX path did not run";
  EXPECT_LT(amx_error, 1e-3);
  EXPECT_LT(amx_error, rounded_error / 10) << "the split input is no nearer than one rounding";
  // A decoded token multiplies one row at a time: the same fp32 GEMV as the plain engine, on a cache
  // that the prefill's rounding moved only slightly.
  const std::span<const float> decoded = plain.decode(ids_[40]);
  const std::vector<float> next_plain(decoded.begin(), decoded.end());
  EXPECT_LT(relative_max_error(amx.decode(ids_[40]), next_plain), 3e-2);
}

// Weights in huge pages (the default) against weights read from the file's map: the same values at
// the same addresses, so the same logits bit for bit; the device line says which. The tiny synthetic
// model (~20 MB) is over a huge page; two loads of it, one left mapped.
TEST(CpuEngineWeightPages, HugePagesChangeNoLogit) {
  for (const char* preset : {"tiny", "tiny-hybrid"}) {
    const std::filesystem::path dir = test::scratch_dir(preset);
    write_synthetic_model({.preset = preset, .seed = 11, .dtype = DType::BF16, .out_dir = dir, .tokenizer_dir = {}, .threads = 2});
    const auto mapped_model = load_model(dir.string()), moved_model = load_model(dir.string());
    const EngineOptions base{.device = "cpu", .context = 64, .threads = 2, .quiet = true};
    EngineOptions mapped_options = base, moved_options = base;
    mapped_options.huge_pages = false;
    auto mapped = create_engine(mapped_model, mapped_options);
    auto moved = create_engine(moved_model, moved_options);
    EXPECT_FALSE(mapped_model->checkpoint->in_huge_pages());
    EXPECT_EQ(mapped->device_name().find("huge pages"), std::string::npos) << mapped->device_name();
    std::string why;
    if (huge_pages::available(&why)) {
      EXPECT_TRUE(moved_model->checkpoint->in_huge_pages()) << preset;
      EXPECT_NE(moved->device_name().find(", weights in huge pages"), std::string::npos) << moved->device_name();
    } else {
      EXPECT_EQ(moved->device_name(), mapped->device_name()) << why;
    }
    const std::vector<int32_t> prompt = {9, 8, 7, 6, 5, 4, 3, 2, 1, 100, 200, 300};
    const auto a = mapped->prefill(prompt);
    const std::vector<float> first(a.begin(), a.end());
    const auto b = moved->prefill(prompt);
    ASSERT_EQ(first, std::vector<float>(b.begin(), b.end())) << preset;
    for (int32_t token : {17, 4242, 31337}) {
      const auto x = mapped->decode(token);
      const std::vector<float> expected(x.begin(), x.end());
      const auto y = moved->decode(token);
      ASSERT_EQ(expected, std::vector<float>(y.begin(), y.end())) << preset << ", token " << token;
    }
  }
}

}  // namespace
}  // namespace megaqwen

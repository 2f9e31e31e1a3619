// Behaviour of the CPU hybrid engine on one Qwen3.5 fixture model (tests/fixtures/hf_qwen35/
// llf_text_untied_bf16: layers [linear, linear, full], 2 value heads per key head): prefill/decode
// consistency, truncate through the DeltaNet state snapshots and replay, the benchmark's noise fill,
// errors that leave the engine usable, determinism across thread counts, and Generator prefix reuse.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/hf_fixture.h"
#include "megaqwen/engine/cpu_qwen35_engine.h"
#include "megaqwen/engine/generator.h"
#include "megaqwen/model/model.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

using test::kLogitTolerance;
using test::relative_max_error;

class CpuHybridEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto dir = test::hf_qwen35_fixtures_dir() / "llf_text_untied_bf16";
    model_ = load_model(dir.string());
    // The longest recorded sequence (70 random ids) is the workload of every test here.
    const nlohmann::json expected = test::read_json(dir / "expected.json");
    for (const nlohmann::json& seq : expected.at("sequences")) {
      auto ids = seq.at("ids").get<std::vector<int32_t>>();
      if (ids.size() > ids_.size()) ids_ = std::move(ids);
    }
  }
  static void TearDownTestSuite() { model_.reset(); }

  int vocab() const { return model_->config.vocab_size; }
  std::span<const float> row(const std::vector<float>& all, size_t pos) const {
    return std::span<const float>(all).subspan(pos * size_t(vocab()), size_t(vocab()));
  }
  CpuHybridEngine engine(int threads = 2, int context = 256) const {
    return CpuHybridEngine(model_, {.context = context, .threads = threads});
  }
  // Logits of every position of ids_, from one prefill.
  std::vector<float> whole_prefill(int threads = 2) const {
    CpuHybridEngine e = engine(threads);
    std::vector<float> out;
    e.prefill_all_logits(ids_, out);
    return out;
  }

  static std::shared_ptr<const Model> model_;
  static std::vector<int32_t> ids_;
};

std::shared_ptr<const Model> CpuHybridEngineTest::model_;
std::vector<int32_t> CpuHybridEngineTest::ids_;

TEST_F(CpuHybridEngineTest, FixtureLoaded) {
  ASSERT_GE(ids_.size(), 64u);
  const ModelConfig& c = model_->config;
  EXPECT_EQ(c.count_layers(LayerType::LinearAttention), 2);
  EXPECT_EQ(c.count_layers(LayerType::FullAttention), 1);
  EXPECT_EQ(c.linear_num_value_heads / c.linear_num_key_heads, 2);
  EXPECT_FALSE(c.tie_word_embeddings);
}

// Prefill of the whole sequence == prefill of a prefix + decode of the rest, for several split points
// (the conv window is 4, so splits 1 and 2 start decoding with a partly empty conv state).
TEST_F(CpuHybridEngineTest, PrefixPrefillPlusDecodeEqualsWholePrefill) {
  const std::vector<float> whole = whole_prefill();
  for (size_t split : {size_t(1), size_t(2), size_t(5), size_t(31), ids_.size() - 1}) {
    CpuHybridEngine e = engine();
    std::vector<float> prefix;
    e.prefill_all_logits(std::span(ids_).first(split), prefix);
    double worst = 0;
    for (size_t pos = 0; pos < ids_.size(); ++pos) {
      std::span<const float> actual = pos < split ? row(prefix, pos) : e.decode(ids_[pos]);
      worst = std::max(worst, relative_max_error(actual, row(whole, pos)));
    }
    EXPECT_LE(worst, kLogitTolerance) << "split at " << split;
    EXPECT_EQ(e.position(), int(ids_.size()));
  }
}

// Prefill in one call == prefill in several calls of uneven sizes.
TEST_F(CpuHybridEngineTest, PrefillInOneCallEqualsSeveralCalls) {
  const std::vector<float> whole = whole_prefill();
  CpuHybridEngine e = engine();
  size_t begin = 0;
  double worst = 0;
  for (size_t n : {size_t(1), size_t(3), size_t(16), size_t(2), size_t(30)}) {
    std::vector<float> part;
    e.prefill_all_logits(std::span(ids_).subspan(begin, n), part);
    for (size_t i = 0; i < n; ++i) worst = std::max(worst, relative_max_error(row(part, i), row(whole, begin + i)));
    begin += n;
  }
  std::span<const float> last = e.prefill(std::span(ids_).subspan(begin));
  worst = std::max(worst, relative_max_error(last, row(whole, ids_.size() - 1)));
  EXPECT_LE(worst, kLogitTolerance);
  EXPECT_EQ(e.position(), int(ids_.size()));
}

// truncate(n) restores the DeltaNet states at n: onto a snapshot (the end of a prefill) exactly, with
// nothing replayed; between snapshots by replaying the remembered ids (the same math in another batch
// shape, so within the tolerance); and the KV cache of the attention layer needs nothing.
TEST_F(CpuHybridEngineTest, TruncateRestoresTheRecurrentState) {
  CpuHybridEngine e = engine();
  e.prefill(std::span(ids_).first(20));
  EXPECT_EQ(e.snapshot_positions(), std::vector<int>{20});
  std::vector<std::vector<float>> first;
  for (size_t pos = 20; pos < 40; ++pos) {
    auto l = e.decode(ids_[pos]);
    first.emplace_back(l.begin(), l.end());
  }

  // Onto the snapshot: bit-identical re-decode, nothing replayed.
  e.truncate(20);
  EXPECT_EQ(e.position(), 20);
  EXPECT_EQ(e.replayed_tokens(), 0);
  for (size_t pos = 20; pos < 40; ++pos) {
    auto l = e.decode(ids_[pos]);
    ASSERT_EQ(std::vector<float>(l.begin(), l.end()), first[pos - 20]) << "position " << pos;
  }

  // Between snapshots: 5 tokens replayed from 20, then a snapshot at 25.
  e.truncate(25);
  EXPECT_EQ(e.position(), 25);
  EXPECT_EQ(e.replayed_tokens(), 5);
  EXPECT_EQ(e.snapshot_positions(), (std::vector<int>{20, 25}));
  for (size_t pos = 25; pos < 40; ++pos)
    EXPECT_LE(relative_max_error(e.decode(ids_[pos]), first[pos - 20]), kLogitTolerance) << "position " << pos;

  // Before every snapshot: replay from 0; snapshots past 10 are dropped. A different continuation
  // then matches a fresh engine.
  e.truncate(10);
  EXPECT_EQ(e.position(), 10);
  EXPECT_EQ(e.replayed_tokens(), 15);
  EXPECT_EQ(e.snapshot_positions(), std::vector<int>{10});
  const std::vector<int32_t> other = {3, 1, 4, 1, 5, 9, 2, 6};
  std::vector<float> after_truncate;
  e.prefill_all_logits(other, after_truncate);
  CpuHybridEngine fresh = engine();
  fresh.prefill(std::span(ids_).first(10));
  std::vector<float> reference;
  fresh.prefill_all_logits(other, reference);
  for (size_t i = 0; i < other.size(); ++i)
    EXPECT_LE(relative_max_error(row(after_truncate, i), row(reference, i)), kLogitTolerance) << "token " << i;

  // truncate(0) empties the states; the whole sequence then matches a fresh prefill.
  e.truncate(0);
  EXPECT_EQ(e.position(), 0);
  EXPECT_TRUE(e.snapshot_positions().empty());
  std::vector<float> again;
  e.prefill_all_logits(ids_, again);
  const std::vector<float> whole = whole_prefill();
  EXPECT_EQ(again, whole);  // same calls from the same (zero) state: bit-identical

  // Out-of-range truncation is refused and changes nothing.
  const int before = e.position();
  EXPECT_THROW(e.truncate(before + 1), Error);
  EXPECT_THROW(e.truncate(-1), Error);
  EXPECT_EQ(e.position(), before);
}

// Many prefill calls keep at most kMaxSnapshots snapshots (the oldest go first), and rolling back
// behind the oldest kept one still works by replaying from further back.
TEST_F(CpuHybridEngineTest, SnapshotsAreBounded) {
  CpuHybridEngine e = engine();
  const size_t calls = CpuHybridEngine::kMaxSnapshots + 3;
  for (size_t i = 0; i < calls; ++i) e.prefill(std::span(ids_).subspan(i * 4, 4));
  const std::vector<int> kept = e.snapshot_positions();
  ASSERT_EQ(kept.size(), CpuHybridEngine::kMaxSnapshots);
  EXPECT_EQ(kept.front(), 4 * int(calls - CpuHybridEngine::kMaxSnapshots + 1));
  EXPECT_EQ(kept.back(), 4 * int(calls));

  e.truncate(6);  // behind every snapshot: replay 0..6
  const std::vector<float> whole = whole_prefill();
  for (size_t pos = 6; pos < 20; ++pos)
    EXPECT_LE(relative_max_error(e.decode(ids_[pos]), row(whole, pos)), kLogitTolerance) << "position " << pos;
}

// The benchmark's noise fill: decode runs at depth, rolling back to the fill point works, into the
// noise is refused (there are no tokens to replay), and truncate(0) starts clean.
TEST_F(CpuHybridEngineTest, NoiseFilledCache) {
  CpuHybridEngine e = engine();
  e.fill_cache_with_noise(30);
  EXPECT_EQ(e.position(), 30);
  auto l = e.decode(ids_[0]);
  for (float v : l) ASSERT_TRUE(std::isfinite(v));
  const std::vector<float> at_31(l.begin(), l.end());
  e.truncate(30);
  auto again = e.decode(ids_[0]);
  EXPECT_EQ(std::vector<float>(again.begin(), again.end()), at_31);
  try {
    e.truncate(10);
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("noise"), std::string::npos) << err.what();
  }
  EXPECT_EQ(e.position(), 31);
  e.truncate(0);
  std::vector<float> out;
  e.prefill_all_logits(ids_, out);
  EXPECT_EQ(out, whole_prefill());
  // Only the attention layer's cache is per token: 1 layer x (k + v) x kv_dim floats.
  EXPECT_EQ(e.kv_bytes_per_token(), uint64_t(2 * model_->config.kv_dim() * sizeof(float)));
}

// Expects `fn` to throw Error whose message contains every one of `needles`.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "no megaqwen::Error thrown";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& needle : needles)
      EXPECT_NE(message.find(needle), std::string::npos) << "message '" << message << "' lacks '" << needle << "'";
  }
}

// A token id out of range is refused with a message naming it, nothing is appended (no state is
// touched), and the engine continues exactly as if the bad call had not been made.
TEST_F(CpuHybridEngineTest, TokenOutOfRangeThrowsAndEngineStaysUsable) {
  const std::vector<float> whole = whole_prefill();
  CpuHybridEngine e = engine();
  e.prefill(std::span(ids_).first(10));
  const int V = vocab();
  expect_error([&] { e.decode(V); }, {std::to_string(V), "out of range"});
  expect_error([&] { e.decode(-1); }, {"-1", "out of range"});
  const std::vector<int32_t> bad_batch = {ids_[10], ids_[11], V + 7, ids_[12]};
  expect_error([&] { e.prefill(bad_batch); }, {std::to_string(V + 7), "out of range"});
  std::vector<float> out;
  expect_error([&] { e.prefill_all_logits(bad_batch, out); }, {std::to_string(V + 7), "out of range"});
  expect_error([&] { e.prefill(std::span<const int32_t>()); }, {});
  EXPECT_EQ(e.position(), 10);
  for (size_t pos = 10; pos < 20; ++pos)
    EXPECT_LE(relative_max_error(e.decode(ids_[pos]), row(whole, pos)), kLogitTolerance) << "position " << pos;
}

// Overflowing the context is refused with a message about the context; once full, decode is refused.
TEST_F(CpuHybridEngineTest, ContextOverflowThrowsAndEngineStaysUsable) {
  const std::vector<float> whole = whole_prefill();
  const int context = 16;
  CpuHybridEngine e = engine(2, context);
  EXPECT_EQ(e.context_size(), context);
  expect_error([&] { e.prefill(std::span(ids_).first(context + 1)); }, {"context"});
  EXPECT_EQ(e.position(), 0);
  e.prefill(std::span(ids_).first(10));
  expect_error([&] { e.prefill(std::span(ids_).subspan(10, 7)); }, {"context"});
  EXPECT_EQ(e.position(), 10);
  for (size_t pos = 10; pos < size_t(context); ++pos)
    EXPECT_LE(relative_max_error(e.decode(ids_[pos]), row(whole, pos)), kLogitTolerance) << "position " << pos;
  expect_error([&] { e.decode(ids_[size_t(context)]); }, {"context"});
  EXPECT_EQ(e.position(), context);
  e.truncate(context - 1);
  EXPECT_LE(relative_max_error(e.decode(ids_[size_t(context - 1)]), row(whole, size_t(context - 1))), kLogitTolerance);
}

// The thread count only splits work (matmul rows, conv channels, DeltaNet heads): 1, 2 and 3 threads
// give bit-identical logits.
TEST_F(CpuHybridEngineTest, ThreadCountDoesNotChangeLogits) {
  auto run = [&](int threads) {
    CpuHybridEngine e = engine(threads);
    std::vector<float> all;
    e.prefill_all_logits(std::span(ids_).first(40), all);
    for (size_t pos = 40; pos < ids_.size(); ++pos) {
      auto l = e.decode(ids_[pos]);
      all.insert(all.end(), l.begin(), l.end());
    }
    return all;
  };
  const std::vector<float> one = run(1);
  for (int threads : {2, 3}) {
    const std::vector<float> other = run(threads);
    ASSERT_EQ(other.size(), one.size());
    EXPECT_EQ(std::memcmp(one.data(), other.data(), one.size() * sizeof(float)), 0) << threads << " threads vs 1";
  }
}

// Generator's prefix reuse on the hybrid engine (what chat turns do): a second prompt that shares part
// of the first conversation (cut inside the generated reply) gives the same greedy tokens as a fresh
// engine, while prefilling only the new part.
TEST_F(CpuHybridEngineTest, GeneratorPrefixReuseMatchesFreshEngine) {
  GenerationRequest first;
  first.prompt.assign(ids_.begin(), ids_.begin() + 12);
  first.max_tokens = 10;
  first.sampling.temperature = 0;
  CpuHybridEngine e = engine();
  Generator gen(e);
  const GenerationResult r1 = gen.run(first);
  ASSERT_EQ(r1.tokens.size(), 10u);

  GenerationRequest second = first;
  second.prompt.insert(second.prompt.end(), r1.tokens.begin(), r1.tokens.begin() + 4);  // cut into the reply
  second.prompt.insert(second.prompt.end(), ids_.begin() + 40, ids_.begin() + 46);
  const GenerationResult r2 = gen.run(second);
  EXPECT_EQ(r2.reused_tokens, 16);

  CpuHybridEngine fresh_engine = engine();
  Generator fresh(fresh_engine);
  const GenerationResult want = fresh.run(second);
  EXPECT_EQ(want.reused_tokens, 0);
  EXPECT_EQ(r2.tokens, want.tokens);
}

}  // namespace
}  // namespace megaqwen

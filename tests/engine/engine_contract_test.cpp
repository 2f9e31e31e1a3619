// The Engine contract (src/megaqwen/engine/engine.h) that every engine keeps, checked on each engine
// through create_engine: prefill/decode consistency, chunked prefill, errors that leave the engine
// usable, and determinism across thread counts. The parameter is a fixture case folder relative to
// tests/fixtures; its model picks the engine (hf/: CpuEngine; hf_qwen35/: CpuHybridEngine), so an
// engine for another model family joins by adding one of its cases below. Each engine's own behaviour
// (truncate, snapshots, noise fill) stays in its file: cpu_engine_test.cpp, cpu_qwen35_engine_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/hf_fixture.h"
#include "megaqwen/engine/create_engine.h"
#include "megaqwen/engine/engine.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

using test::kLogitTolerance;
using test::decode_rest;
using test::relative_max_error;

class EngineContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    w_ = test::load_engine_workload(test::fixtures_dir() / GetParam());
    // The longest recorded sequence (70 random ids) is the workload of every test here.
    ASSERT_GE(ids_.size(), 64u);
  }

  int vocab() const { return w_.vocab(); }
  std::span<const float> row(const std::vector<float>& all, size_t pos) const { return w_.row(all, pos); }
  std::unique_ptr<Engine> engine(int threads = 2, int context = 256) const {
    return create_engine(w_.model, {.device = "cpu", .context = context, .threads = threads, .quiet = true});
  }
  // Logits of every position of ids_, from one prefill.
  std::vector<float> whole_prefill() const { return test::prefill_logits(*engine(), ids_); }

  test::EngineWorkload w_;
  const std::vector<int32_t>& ids_ = w_.ids;
};

// Prefill of the whole sequence == prefill of a prefix + decode of the rest, for several split points
// (on the hybrid engine the conv window is 4, so splits 1 and 2 start decoding with a partly empty conv
// state). Metric and tolerance as in the HF parity test (fp32 both ways, different summation order).
TEST_P(EngineContract, PrefixPrefillPlusDecodeEqualsWholePrefill) {
  const std::vector<float> whole = whole_prefill();
  for (size_t split : {size_t(1), size_t(2), size_t(5), size_t(31), ids_.size() - 1}) {
    auto e = engine();
    std::vector<float> prefix;
    e->prefill_all_logits(std::span(ids_).first(split), prefix);
    double worst = 0;
    for (size_t pos = 0; pos < ids_.size(); ++pos) {
      std::span<const float> actual = pos < split ? row(prefix, pos) : e->decode(ids_[pos]);
      worst = std::max(worst, relative_max_error(actual, row(whole, pos)));
    }
    EXPECT_LE(worst, kLogitTolerance) << "split at " << split;
    EXPECT_EQ(e->position(), int(ids_.size()));
  }
}

// Prefill in one call == prefill in several calls of uneven sizes; prefill()'s returned logits are the
// last row of prefill_all_logits.
TEST_P(EngineContract, PrefillInOneCallEqualsSeveralCalls) {
  const std::vector<float> whole = whole_prefill();
  auto e = engine();
  size_t begin = 0;
  double worst = 0;
  for (size_t n : {size_t(1), size_t(3), size_t(16), size_t(2), size_t(30)}) {
    std::vector<float> part;
    e->prefill_all_logits(std::span(ids_).subspan(begin, n), part);
    ASSERT_EQ(part.size(), n * size_t(vocab()));
    for (size_t i = 0; i < n; ++i) worst = std::max(worst, relative_max_error(row(part, i), row(whole, begin + i)));
    begin += n;
  }
  std::span<const float> last = e->prefill(std::span(ids_).subspan(begin));
  EXPECT_EQ(e->position(), int(ids_.size()));
  ASSERT_EQ(last.size(), size_t(vocab()));
  worst = std::max(worst, relative_max_error(last, row(whole, ids_.size() - 1)));
  EXPECT_LE(worst, kLogitTolerance);

  auto single = engine();
  std::span<const float> single_last = single->prefill(ids_);
  EXPECT_LE(relative_max_error(single_last, row(whole, ids_.size() - 1)), kLogitTolerance);
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

// A token id out of range is refused with a message naming it, nothing is appended (no cache or
// recurrent state is touched), and the engine continues exactly as if the bad call had not been made.
TEST_P(EngineContract, TokenOutOfRangeThrowsAndEngineStaysUsable) {
  const std::vector<float> whole = whole_prefill();
  auto e = engine();
  e->prefill(std::span(ids_).first(10));
  const int V = vocab();

  expect_error([&] { e->decode(V); }, {std::to_string(V), "out of range"});
  expect_error([&] { e->decode(-1); }, {"-1", "out of range"});
  const std::vector<int32_t> bad_batch = {ids_[10], ids_[11], V + 7, ids_[12]};
  expect_error([&] { e->prefill(bad_batch); }, {std::to_string(V + 7), "out of range"});
  std::vector<float> out;
  expect_error([&] { e->prefill_all_logits(bad_batch, out); }, {std::to_string(V + 7), "out of range"});
  expect_error([&] { e->prefill(std::span<const int32_t>()); }, {});
  EXPECT_EQ(e->position(), 10);

  for (size_t pos = 10; pos < 20; ++pos)
    EXPECT_LE(relative_max_error(e->decode(ids_[pos]), row(whole, pos)), kLogitTolerance) << "position " << pos;
  EXPECT_EQ(e->position(), 20);
}

// Overflowing the context is refused with a message about the context, nothing is appended, and the
// engine can still fill the remaining room; once full, decode is refused too.
TEST_P(EngineContract, ContextOverflowThrowsAndEngineStaysUsable) {
  const std::vector<float> whole = whole_prefill();
  const int context = 16;
  auto e = engine(2, context);
  EXPECT_EQ(e->context_size(), context);

  expect_error([&] { e->prefill(std::span(ids_).first(context + 1)); }, {"context"});
  EXPECT_EQ(e->position(), 0);

  e->prefill(std::span(ids_).first(10));
  expect_error([&] { e->prefill(std::span(ids_).subspan(10, 7)); }, {"context"});
  std::vector<float> out;
  expect_error([&] { e->prefill_all_logits(std::span(ids_).subspan(10, 7), out); }, {"context"});
  EXPECT_EQ(e->position(), 10);

  for (size_t pos = 10; pos < size_t(context); ++pos)
    EXPECT_LE(relative_max_error(e->decode(ids_[pos]), row(whole, pos)), kLogitTolerance) << "position " << pos;
  EXPECT_EQ(e->position(), context);
  expect_error([&] { e->decode(ids_[size_t(context)]); }, {"context"});
  EXPECT_EQ(e->position(), context);

  // Making room again works.
  e->truncate(context - 1);
  EXPECT_LE(relative_max_error(e->decode(ids_[size_t(context - 1)]), row(whole, size_t(context - 1))),
            kLogitTolerance);
}

// The thread count only splits work (matmul rows; on the hybrid engine also conv channels and DeltaNet
// heads): 1, 2 and 3 threads give bit-identical logits.
TEST_P(EngineContract, ThreadCountDoesNotChangeLogits) {
  auto run = [&](int threads) {
    auto e = engine(threads);
    std::vector<float> all;
    e->prefill_all_logits(std::span(ids_).first(40), all);
    for (size_t pos = 40; pos < ids_.size(); ++pos) {
      auto l = e->decode(ids_[pos]);
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

// save_state() then anything else, then restore_state(): decoding goes on bit-identically to an
// engine that never left the sequence (the same computations on the same cache contents).
TEST_P(EngineContract, RestoredSequenceDecodesAsIfNeverLeft) {
  auto straight = engine();
  straight->prefill(std::span(ids_).first(20));
  straight->prefill(std::span(ids_).subspan(20, 20));
  const std::vector<float> expected = decode_rest(*straight, ids_, 40);

  auto e = engine();
  e->prefill(std::span(ids_).first(20));
  e->prefill(std::span(ids_).subspan(20, 20));
  std::unique_ptr<EngineState> saved = e->save_state();
  ASSERT_NE(saved, nullptr);
  EXPECT_EQ(saved->position(), 40);
  EXPECT_GE(saved->bytes(), 40 * e->kv_bytes_per_token());
  // Another sequence overwrites the cache (and, on the hybrid engine, the states and snapshots).
  std::vector<int32_t> other(ids_.rbegin(), ids_.rbegin() + 50);
  e->truncate(0);
  e->prefill(other);
  e->decode(ids_[3]);
  e->restore_state(*saved);
  EXPECT_EQ(e->position(), 40);
  const std::vector<float> actual = decode_rest(*e, ids_, 40);
  ASSERT_EQ(actual.size(), expected.size());
  EXPECT_EQ(std::memcmp(actual.data(), expected.data(), actual.size() * sizeof(float)), 0);

  // The state is unchanged by the restore: it restores again, into another engine too.
  auto fresh = engine();
  fresh->restore_state(*saved);
  const std::vector<float> again = decode_rest(*fresh, ids_, 40);
  EXPECT_EQ(std::memcmp(again.data(), expected.data(), again.size() * sizeof(float)), 0);
}

// A restored sequence truncates like the original: back to the end of its first prefill call (where
// the hybrid engine kept a snapshot) and to a point between (replayed), then decodes as a straight run.
TEST_P(EngineContract, RestoredSequenceTruncatesLikeTheOriginal) {
  for (int cut : {20, 13}) {
    auto straight = engine();
    straight->prefill(std::span(ids_).first(size_t(cut)));
    const std::vector<float> expected = decode_rest(*straight, std::span(ids_).first(60), size_t(cut));

    auto e = engine();
    e->prefill(std::span(ids_).first(20));
    e->prefill(std::span(ids_).subspan(20, 20));
    std::unique_ptr<EngineState> saved = e->save_state();
    e->truncate(0);
    e->prefill(std::span(ids_).subspan(7, 30));
    e->restore_state(*saved);
    e->truncate(cut);
    const std::vector<float> actual = decode_rest(*e, std::span(ids_).first(60), size_t(cut));
    ASSERT_EQ(actual.size(), expected.size());
    EXPECT_LE(relative_max_error(actual, expected), kLogitTolerance) << "cut at " << cut;
  }
}

// An empty cache saves and restores too (position 0).
TEST_P(EngineContract, EmptyCacheSavesAndRestores) {
  auto e = engine();
  std::unique_ptr<EngineState> empty = e->save_state();
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->position(), 0);
  e->prefill(std::span(ids_).first(10));
  e->restore_state(*empty);
  EXPECT_EQ(e->position(), 0);
  const std::vector<float> from_empty = test::prefill_logits(*e, ids_);
  EXPECT_LE(relative_max_error(from_empty, whole_prefill()), kLogitTolerance);
}

// A state from another kind of engine, another model or a longer sequence than the context is refused
// by name, and the engine goes on with its own sequence.
TEST_P(EngineContract, ForeignStatesAreRefused) {
  struct OtherKind final : EngineState {
    explicit OtherKind(const Model* m) : EngineState(m, 1) {}
    uint64_t bytes() const override { return 0; }
  };
  auto big = engine();
  big->prefill(std::span(ids_).first(40));
  std::unique_ptr<EngineState> long_state = big->save_state();

  auto e = engine(2, 32);
  e->prefill(std::span(ids_).first(5));
  auto expect_refused = [&](const EngineState& state, const std::string& words) {
    try {
      e->restore_state(state);
      ADD_FAILURE() << "restored a state that should be refused (" << words << ")";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(words), std::string::npos) << err.what();
    }
    EXPECT_EQ(e->position(), 5);
  };
  expect_refused(OtherKind(w_.model.get()), "another kind of engine");
  expect_refused(*long_state, "the context holds 32");
  const std::string other_case = GetParam().starts_with("hf/") ? "hf_qwen35/fllf_text_bf16" : "hf/gqa2_bf16";
  const test::EngineWorkload other = test::load_engine_workload(test::fixtures_dir() / other_case);
  auto other_engine = create_engine(other.model, {.device = "cpu", .context = 32, .threads = 2, .quiet = true});
  other_engine->prefill(std::span(other.ids).first(3));
  expect_refused(*other_engine->save_state(), "");  // another kind (Qwen3 vs Qwen3.5) or another model
  // The same weights loaded again are another Model: a state is tied to the model it was made with.
  const test::EngineWorkload twin = test::load_engine_workload(test::fixtures_dir() / GetParam());
  auto twin_engine = create_engine(twin.model, {.device = "cpu", .context = 32, .threads = 2, .quiet = true});
  twin_engine->prefill(std::span(ids_).first(3));
  expect_refused(*twin_engine->save_state(), "another model");
  // Still usable: its own sequence goes on.
  auto straight = engine(2, 32);
  straight->prefill(std::span(ids_).first(5));
  EXPECT_LE(relative_max_error(e->decode(ids_[5]), straight->decode(ids_[5])), kLogitTolerance);
}

// CpuEngine: 3 layers, GQA 2. CpuHybridEngine: layers [linear, linear, full] with 2 value heads per key
// head and an untied head; and [full, linear, linear, full] (attention first).
INSTANTIATE_TEST_SUITE_P(Engines, EngineContract,
                         ::testing::Values("hf/gqa2_bf16", "hf_qwen35/llf_text_untied_bf16", "hf_qwen35/fllf_text_bf16"),
                         test::fixture_case_name);

}  // namespace
}  // namespace megaqwen

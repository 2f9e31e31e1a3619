// Behaviour of the CPU engine on one fixture model (tests/fixtures/hf/gqa2_bf16: 3 layers, GQA 2):
// prefill/decode consistency, truncate, chunked prefill, errors that leave the engine usable, and
// determinism across thread counts.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/hf_fixture.h"
#include "megaqwen/engine/cpu_engine.h"
#include "megaqwen/model/model.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

using test::kLogitTolerance;
using test::relative_max_error;

class CpuEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto dir = test::hf_fixtures_dir() / "gqa2_bf16";
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
  // Logits of every position of ids_, from one prefill.
  std::vector<float> whole_prefill(int threads = 2) const {
    CpuEngine engine(model_, {.context = 256, .threads = threads});
    std::vector<float> out;
    engine.prefill_all_logits(ids_, out);
    return out;
  }

  static std::shared_ptr<const Model> model_;
  static std::vector<int32_t> ids_;
};

std::shared_ptr<const Model> CpuEngineTest::model_;
std::vector<int32_t> CpuEngineTest::ids_;

TEST_F(CpuEngineTest, FixtureLoaded) {
  ASSERT_GE(ids_.size(), 64u);
  EXPECT_EQ(model_->config.num_heads / model_->config.num_kv_heads, 2);
}

// Prefill of the whole sequence == prefill of a prefix + decode of the rest, for several split points.
// Metric and tolerance as in the HF parity test (fp32 both ways, different summation order).
TEST_F(CpuEngineTest, PrefixPrefillPlusDecodeEqualsWholePrefill) {
  const std::vector<float> whole = whole_prefill();
  for (size_t split : {size_t(1), size_t(5), size_t(31), ids_.size() - 1}) {
    CpuEngine engine(model_, {.context = 256, .threads = 2});
    std::vector<float> prefix;
    engine.prefill_all_logits(std::span(ids_).first(split), prefix);
    double worst = 0;
    for (size_t pos = 0; pos < ids_.size(); ++pos) {
      std::span<const float> actual = pos < split ? row(prefix, pos) : engine.decode(ids_[pos]);
      worst = std::max(worst, relative_max_error(actual, row(whole, pos)));
    }
    EXPECT_LE(worst, kLogitTolerance) << "split at " << split;
    EXPECT_EQ(engine.position(), int(ids_.size()));
  }
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

// Prefill in one call == prefill in several calls of uneven sizes; prefill()'s returned logits are the
// last row of prefill_all_logits.
TEST_F(CpuEngineTest, PrefillInOneCallEqualsSeveralCalls) {
  const std::vector<float> whole = whole_prefill();
  CpuEngine engine(model_, {.context = 256, .threads = 2});
  size_t begin = 0;
  double worst = 0;
  for (size_t n : {size_t(1), size_t(16), size_t(2), size_t(30)}) {
    std::vector<float> part;
    engine.prefill_all_logits(std::span(ids_).subspan(begin, n), part);
    ASSERT_EQ(part.size(), n * size_t(vocab()));
    for (size_t i = 0; i < n; ++i) worst = std::max(worst, relative_max_error(row(part, i), row(whole, begin + i)));
    begin += n;
  }
  std::span<const float> last = engine.prefill(std::span(ids_).subspan(begin));
  EXPECT_EQ(engine.position(), int(ids_.size()));
  ASSERT_EQ(last.size(), size_t(vocab()));
  worst = std::max(worst, relative_max_error(last, row(whole, ids_.size() - 1)));
  EXPECT_LE(worst, kLogitTolerance);

  CpuEngine single(model_, {.context = 256, .threads = 2});
  std::span<const float> single_last = single.prefill(ids_);
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

// A token id out of range is refused with a message naming it, nothing is appended, and the engine
// continues exactly as if the bad call had not been made.
TEST_F(CpuEngineTest, TokenOutOfRangeThrowsAndEngineStaysUsable) {
  const std::vector<float> whole = whole_prefill();
  CpuEngine engine(model_, {.context = 256, .threads = 2});
  engine.prefill(std::span(ids_).first(10));
  const int V = vocab();

  expect_error([&] { engine.decode(V); }, {std::to_string(V), "out of range"});
  expect_error([&] { engine.decode(-1); }, {"-1", "out of range"});
  const std::vector<int32_t> bad_batch = {ids_[10], ids_[11], V + 7, ids_[12]};
  expect_error([&] { engine.prefill(bad_batch); }, {std::to_string(V + 7), "out of range"});
  std::vector<float> out;
  expect_error([&] { engine.prefill_all_logits(bad_batch, out); }, {std::to_string(V + 7), "out of range"});
  expect_error([&] { engine.prefill(std::span<const int32_t>()); }, {});
  EXPECT_EQ(engine.position(), 10);

  for (size_t pos = 10; pos < 20; ++pos)
    EXPECT_LE(relative_max_error(engine.decode(ids_[pos]), row(whole, pos)), kLogitTolerance) << "position " << pos;
  EXPECT_EQ(engine.position(), 20);
}

// Overflowing the context is refused with a message about the context, nothing is appended, and the
// engine can still fill the remaining room; once full, decode is refused too.
TEST_F(CpuEngineTest, ContextOverflowThrowsAndEngineStaysUsable) {
  const std::vector<float> whole = whole_prefill();
  const int context = 16;
  CpuEngine engine(model_, {.context = context, .threads = 2});
  EXPECT_EQ(engine.context_size(), context);

  expect_error([&] { engine.prefill(std::span(ids_).first(context + 1)); }, {"context"});
  EXPECT_EQ(engine.position(), 0);

  engine.prefill(std::span(ids_).first(10));
  expect_error([&] { engine.prefill(std::span(ids_).subspan(10, 7)); }, {"context"});
  std::vector<float> out;
  expect_error([&] { engine.prefill_all_logits(std::span(ids_).subspan(10, 7), out); }, {"context"});
  EXPECT_EQ(engine.position(), 10);

  for (size_t pos = 10; pos < size_t(context); ++pos)
    EXPECT_LE(relative_max_error(engine.decode(ids_[pos]), row(whole, pos)), kLogitTolerance) << "position " << pos;
  EXPECT_EQ(engine.position(), context);
  expect_error([&] { engine.decode(ids_[size_t(context)]); }, {"context"});
  EXPECT_EQ(engine.position(), context);

  // Making room again works.
  engine.truncate(context - 1);
  EXPECT_LE(relative_max_error(engine.decode(ids_[size_t(context - 1)]), row(whole, size_t(context - 1))),
            kLogitTolerance);
}

// The thread count only splits work: 1, 2 and 3 threads give bit-identical logits.
TEST_F(CpuEngineTest, ThreadCountDoesNotChangeLogits) {
  auto run = [&](int threads) {
    CpuEngine engine(model_, {.context = 256, .threads = threads});
    std::vector<float> all;
    engine.prefill_all_logits(std::span(ids_).first(40), all);
    for (size_t pos = 40; pos < ids_.size(); ++pos) {
      auto l = engine.decode(ids_[pos]);
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

}  // namespace
}  // namespace megaqwen

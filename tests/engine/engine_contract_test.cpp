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

// "hf/gqa2_bf16" -> "hf_gqa2_bf16" (test names take letters, digits and '_').
std::string case_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace_if(name.begin(), name.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return name;
}

// CpuEngine: 3 layers, GQA 2. CpuHybridEngine: layers [linear, linear, full] with 2 value heads per key
// head and an untied head; and [full, linear, linear, full] (attention first).
INSTANTIATE_TEST_SUITE_P(Engines, EngineContract,
                         ::testing::Values("hf/gqa2_bf16", "hf_qwen35/llf_text_untied_bf16", "hf_qwen35/fllf_text_bf16"),
                         case_name);

}  // namespace
}  // namespace megaqwen

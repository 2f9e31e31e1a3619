// Behaviour of the CPU engine of its own on one fixture model (tests/fixtures/hf/gqa2_bf16: 3 layers,
// GQA 2): truncate. What every engine does (prefill/decode consistency, chunked prefill, errors that
// leave the engine usable, determinism across thread counts) is in engine_contract_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/hf_fixture.h"
#include "megaqwen/engine/cpu_engine.h"
#include "megaqwen/model/model.h"
#include "megaqwen/util/error.h"

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

}  // namespace
}  // namespace megaqwen

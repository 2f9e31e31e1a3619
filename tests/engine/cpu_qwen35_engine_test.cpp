// Behaviour of the CPU hybrid engine of its own on one Qwen3.5 fixture model (tests/fixtures/hf_qwen35/
// llf_text_untied_bf16: layers [linear, linear, full], 2 value heads per key head): truncate through the
// DeltaNet state snapshots and replay, the benchmark's noise fill, and Generator prefix reuse. What
// every engine does (prefill/decode consistency, chunked prefill, errors that leave the engine usable,
// determinism across thread counts) is in engine_contract_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
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

class CpuHybridEngineTest : public test::EngineWorkloadTest<CpuHybridEngine> {
 protected:
  static void SetUpTestSuite() {
    w_ = test::load_engine_workload(test::hf_qwen35_fixtures_dir() / "llf_text_untied_bf16");
  }
};

TEST_F(CpuHybridEngineTest, FixtureLoaded) {
  ASSERT_GE(ids_.size(), 64u);
  const ModelConfig& c = model_->config;
  EXPECT_EQ(c.count_layers(LayerType::LinearAttention), 2);
  EXPECT_EQ(c.count_layers(LayerType::FullAttention), 1);
  EXPECT_EQ(c.linear_num_value_heads / c.linear_num_key_heads, 2);
  EXPECT_FALSE(c.tie_word_embeddings);
}

// truncate(n) restores the DeltaNet states at n: onto a snapshot (the end of a prefill) exactly, with
// nothing replayed; between snapshots by replaying the remembered ids (the same math in another batch
// shape, so within the tolerance); and the KV cache of the attention layer needs nothing.
TEST_F(CpuHybridEngineTest, TruncateRestoresTheRecurrentState) {
  CpuHybridEngine e = engine();
  e.prefill(std::span(ids_).first(20));
  EXPECT_EQ(e.snapshot_positions(), (std::vector<int>{19, 20}));  // a long call: before its last token too
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
  EXPECT_EQ(e.snapshot_positions(), (std::vector<int>{19, 20, 25}));
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
  // The DeltaNet layers' states, read and written once per step: S [nv, dk, dv] and the conv window.
  const ModelConfig& c = model_->config;
  const uint64_t per_layer = uint64_t(c.linear_num_value_heads) * c.linear_key_head_dim * c.linear_value_head_dim +
                             uint64_t(c.linear_conv_kernel - 1) * uint64_t(c.linear_conv_dim());
  EXPECT_EQ(e.state_bytes_per_step(),
            2 * sizeof(float) * per_layer * uint64_t(c.count_layers(LayerType::LinearAttention)));
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

// The same prompt again (a regenerated reply): the generator keeps all but the prompt's last token and
// prefills that one anew; a long prefill left a snapshot there, so nothing is replayed, and the greedy
// reply is the same. A short prompt (no such snapshot) replays from the start, a few tokens.
TEST_F(CpuHybridEngineTest, SamePromptAgainReplaysNothing) {
  for (size_t length : {kSnapshotBeforeLastAbove + 14, kSnapshotBeforeLastAbove}) {
    GenerationRequest request;
    request.prompt.assign(ids_.begin(), ids_.begin() + ptrdiff_t(length));
    request.max_tokens = 8;
    request.sampling.temperature = 0;
    CpuHybridEngine e = engine();
    Generator gen(e);
    const GenerationResult first = gen.run(request);
    const GenerationResult again = gen.run(request);
    EXPECT_EQ(again.reused_tokens, int(length) - 1);
    EXPECT_EQ(again.tokens, first.tokens);
    EXPECT_EQ(e.replayed_tokens(), length > kSnapshotBeforeLastAbove ? 0 : int64_t(length) - 1) << length;
  }
}

}  // namespace
}  // namespace megaqwen

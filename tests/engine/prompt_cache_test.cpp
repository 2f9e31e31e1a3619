// PromptCache (src/megaqwen/engine/prompt_cache.h) over the real CPU engines: conversations taking
// turns on one engine get their sequences back instead of prefilling them again, with exactly the
// tokens they would have had if no other conversation had come between; continuing conversations
// cost no copy; the budget, the minimum length and scoring requests are honoured. Parameter: a fixture
// case (hf/: CpuEngine, hf_qwen35/: CpuHybridEngine).
#include "megaqwen/engine/prompt_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/hf_fixture.h"
#include "megaqwen/engine/create_engine.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A cache in host memory (the CPU engines keep their states there), with a folder behind it or not.
PromptCacheOptions host_cache(uint64_t budget, int min_tokens, int max_entries = 64,
                              std::shared_ptr<StateFileStore> disk = nullptr) {
  return {.host_budget_bytes = budget, .device_budget_bytes = 0, .min_tokens = min_tokens, .max_entries = max_entries,
          .disk = std::move(disk)};
}

class PromptCacheTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { w_ = test::load_engine_workload(test::fixtures_dir() / GetParam()); }

  std::unique_ptr<Engine> engine() const {
    return create_engine(w_.model, {.device = "cpu", .context = 256, .threads = 2, .quiet = true});
  }
  // `n` ids from a seeded stream (different seeds: different conversations).
  std::vector<int32_t> ids(uint32_t seed, size_t n) const {
    std::vector<int32_t> out;
    for (size_t i = 0; i < n; ++i) {
      seed = seed * 1664525u + 1013904223u;
      out.push_back(int32_t((seed >> 8) % uint32_t(w_.vocab())));
    }
    return out;
  }
  static GenerationRequest greedy(std::vector<int32_t> prompt, int max_tokens = 6) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    return r;
  }
  // The request run through the cache: prepare, then run.
  static GenerationResult run(PromptCache& cache, Generator& g, const GenerationRequest& r) {
    cache.prepare(g, r);
    return g.run(r);
  }

  // A fresh folder for a StateFileStore, removed after the test.
  std::filesystem::path folder() {
    if (folder_.empty()) {
      folder_ = std::filesystem::path(::testing::TempDir()) /
                ("megaqwen_prompt_cache_" + std::to_string(::getpid()) + "_" +
                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
      std::filesystem::remove_all(folder_);
    }
    return folder_;
  }
  std::shared_ptr<StateFileStore> store(const Engine& e, uint64_t budget = uint64_t(1) << 30) {
    return std::make_shared<StateFileStore>(folder(), budget, w_.model, e.state_format());
  }
  void TearDown() override {
    if (!folder_.empty()) std::filesystem::remove_all(folder_);
  }
  // The bytes one saved 40-token conversation (and its reply) holds.
  uint64_t entry_bytes() const {
    auto e = engine();
    Generator g(*e);
    g.run(greedy(ids(1, 40)));
    return g.save()->state->bytes();
  }
  // What `second` generates after `first` on an engine of its own, without a cache.
  GenerationResult alone(const GenerationRequest& first, const GenerationRequest& second) const {
    auto e = engine();
    Generator g(*e);
    g.run(first);
    return g.run(second);
  }

  test::EngineWorkload w_;
  std::filesystem::path folder_;
};

// A and B take turns. Each of A's and B's second turns restores its own sequence, reuses all of it,
// and generates exactly what it generates when the other conversation never came between.
TEST_P(PromptCacheTest, ConversationsTakingTurnsGetTheirSequencesBack) {
  auto e = engine();
  Generator g(*e);
  PromptCache cache(host_cache(1u << 30, 8));

  const GenerationRequest a1 = greedy(ids(1, 30)), b1 = greedy(ids(2, 25));
  const GenerationResult ra1 = run(cache, g, a1);
  const GenerationResult rb1 = run(cache, g, b1);
  EXPECT_EQ(rb1.reused_tokens, 0);
  EXPECT_EQ(cache.stats().saves, 1);  // A, set aside when B came

  const GenerationRequest a2 = greedy(concat(concat(a1.prompt, ra1.tokens), ids(3, 10)));
  const int restored = cache.prepare(g, a2);
  // A's cache held its prompt and every generated token but the last (never decoded).
  EXPECT_EQ(restored, int(a1.prompt.size() + ra1.tokens.size() - 1));
  const GenerationResult ra2 = g.run(a2);
  EXPECT_EQ(ra2.reused_tokens, restored);
  EXPECT_EQ(cache.stats().saves, 2);  // B, set aside when A came back

  const GenerationRequest b2 = greedy(concat(concat(b1.prompt, rb1.tokens), ids(4, 12)));
  const GenerationResult rb2 = run(cache, g, b2);
  EXPECT_EQ(rb2.reused_tokens, int(b1.prompt.size() + rb1.tokens.size() - 1));

  const PromptCacheStats stats = cache.stats();
  EXPECT_EQ(stats.restores, 2);
  EXPECT_EQ(stats.restored_tokens, (long long)(ra2.reused_tokens + rb2.reused_tokens));
  // A's entry was superseded by its longer sequence, saved when B came back (the most recent entry);
  // B's is still there.
  EXPECT_EQ(cache.entry_sizes(), (std::vector<size_t>{a2.prompt.size() + ra2.tokens.size() - 1,
                                                       b1.prompt.size() + rb1.tokens.size() - 1}));

  // Each conversation alone, on its own engine, without a cache.
  for (const auto& [first, second, got] : {std::tuple(a1, a2, ra2), std::tuple(b1, b2, rb2)}) {
    auto alone_engine = engine();
    Generator alone(*alone_engine);
    alone.run(first);
    const GenerationResult expected = alone.run(second);
    EXPECT_EQ(got.tokens, expected.tokens);
    EXPECT_EQ(got.reused_tokens, expected.reused_tokens);
  }
}

// A conversation that goes on keeps its whole previous prompt, whether its reply comes back as
// generated or re-rendered (as a template that drops the thinking does): nothing is copied.
TEST_P(PromptCacheTest, ContinuingConversationsCostNoCopy) {
  auto e = engine();
  Generator g(*e);
  PromptCache cache(host_cache(1u << 30, 8));
  const GenerationRequest a1 = greedy(ids(1, 30), 12);
  run(cache, g, a1);
  const GenerationRequest a2 = greedy(concat(a1.prompt, ids(6, 9)));  // the reply re-rendered
  const GenerationResult ra2 = run(cache, g, a2);
  EXPECT_EQ(ra2.reused_tokens, int(a1.prompt.size()));
  const GenerationResult ra3 = run(cache, g, greedy(concat(concat(a2.prompt, ra2.tokens), ids(5, 6))));
  EXPECT_EQ(ra3.reused_tokens, int(a2.prompt.size() + ra2.tokens.size() - 1));
  EXPECT_EQ(cache.stats().saves, 0);
  EXPECT_EQ(cache.stats().restores, 0);
}

// Sequences shorter than min_tokens are not saved, nor restored for a gain below it.
TEST_P(PromptCacheTest, ShortSequencesAreNotWorthACopy) {
  auto e = engine();
  Generator g(*e);
  PromptCache cache(host_cache(1u << 30, 40));
  run(cache, g, greedy(ids(1, 20)));
  run(cache, g, greedy(ids(2, 20)));
  EXPECT_EQ(cache.stats().saves, 0);
  run(cache, g, greedy(ids(3, 50)));
  run(cache, g, greedy(ids(4, 50)));  // the 55-token sequence before it is saved
  EXPECT_EQ(cache.stats().saves, 1);
  // Only 20 of its tokens are shared with this prompt: less than min_tokens gained, not restored.
  const std::vector<int32_t> third = ids(3, 50);
  run(cache, g, greedy(concat(std::vector<int32_t>(third.begin(), third.begin() + 20), ids(7, 10))));
  EXPECT_EQ(cache.stats().restores, 0);
}

// The budget holds the most recently used sequences; older ones are evicted.
TEST_P(PromptCacheTest, BudgetEvictsTheLeastRecentlyUsed) {
  const uint64_t one_entry = entry_bytes();
  auto e = engine();
  Generator g(*e);
  // Room for two entries of this size.
  PromptCache cache(host_cache(one_entry * 5 / 2, 8));
  for (uint32_t c = 1; c <= 5; ++c) run(cache, g, greedy(ids(c, 40)));
  const PromptCacheStats stats = cache.stats();
  EXPECT_EQ(stats.saves, 4);
  EXPECT_EQ(stats.evictions, 2);
  EXPECT_EQ(stats.entries, 2u);
  EXPECT_LE(stats.bytes, one_entry * 5 / 2);
  // The two kept are conversations 4 and 3: 3 comes back from the cache, 1 does not.
  const GenerationResult r3 = run(cache, g, greedy(concat(ids(3, 40), ids(8, 4))));
  EXPECT_GE(r3.reused_tokens, 40);
  const GenerationResult r1 = run(cache, g, greedy(concat(ids(1, 40), ids(8, 4))));
  EXPECT_EQ(r1.reused_tokens, 0);
}

// The entry count is bounded too (each request compares its prompt with every entry).
TEST_P(PromptCacheTest, EntryCountIsBounded) {
  auto e = engine();
  Generator g(*e);
  PromptCache cache(host_cache(1u << 30, 8, 2));
  for (uint32_t c = 1; c <= 5; ++c) run(cache, g, greedy(ids(c, 40)));
  EXPECT_EQ(cache.stats().saves, 4);
  EXPECT_EQ(cache.stats().evictions, 2);
  EXPECT_EQ(cache.entry_sizes().size(), 2u);
  EXPECT_THROW(PromptCache(host_cache(1, 8, 0)), Error);
}

// Scoring the prompt prefills all of it: the resident sequence is set aside, nothing is restored.
TEST_P(PromptCacheTest, ScoringRequestsSetTheResidentAside) {
  auto e = engine();
  Generator g(*e);
  PromptCache cache(host_cache(1u << 30, 8));
  const GenerationRequest a1 = greedy(ids(1, 30));
  run(cache, g, a1);
  GenerationRequest scoring = greedy(a1.prompt);
  scoring.prompt_logprobs = true;
  EXPECT_EQ(cache.prepare(g, scoring), 0);
  EXPECT_EQ(cache.stats().saves, 1);
  EXPECT_EQ(g.run(scoring).reused_tokens, 0);
}

// With a folder behind a cache that holds one sequence: evicted sequences are written there, and a
// conversation coming back is read from it, generating what it generates alone.
TEST_P(PromptCacheTest, FolderTakesEvictedSequencesAndServesThemBack) {
  const uint64_t one_entry = entry_bytes();
  auto e = engine();
  Generator g(*e);
  PromptCache cache(host_cache(one_entry * 3 / 2, 8, 64, store(*e)));
  std::vector<GenerationResult> first;
  for (uint32_t c = 1; c <= 4; ++c) first.push_back(run(cache, g, greedy(ids(c, 40))));
  PromptCacheStats stats = cache.stats();
  EXPECT_EQ(stats.saves, 3);
  EXPECT_EQ(stats.evictions, 2);
  EXPECT_EQ(stats.disk_writes, 2);  // conversations 1 and 2
  EXPECT_EQ(stats.disk_entries, 2u);
  EXPECT_GT(stats.disk_bytes, one_entry);

  const GenerationRequest first1 = greedy(ids(1, 40));
  const GenerationRequest second1 = greedy(concat(concat(first1.prompt, first[0].tokens), ids(8, 4)));
  const GenerationResult r = run(cache, g, second1);
  EXPECT_EQ(r.reused_tokens, int(first1.prompt.size() + first[0].tokens.size() - 1));
  stats = cache.stats();
  EXPECT_EQ(stats.disk_restores, 1);
  EXPECT_EQ(stats.restores, 1);
  EXPECT_EQ(stats.errors, 0);
  const GenerationResult expected = alone(first1, second1);
  EXPECT_EQ(r.tokens, expected.tokens);
}

// persist() (the server stopping) writes the resident sequence and every entry; a new cache over the
// same folder, on a new engine (the server started again), gets a conversation back from it.
TEST_P(PromptCacheTest, FolderOutlivesTheProcess) {
  const GenerationRequest a1 = greedy(ids(1, 40)), b1 = greedy(ids(2, 36));
  GenerationResult ra1;
  {
    auto e = engine();
    Generator g(*e);
    PromptCache cache(host_cache(1u << 30, 8, 64, store(*e)));
    ra1 = run(cache, g, a1);
    run(cache, g, b1);
    EXPECT_EQ(cache.stats().disk_writes, 0);
    EXPECT_EQ(cache.persist(g), 2);  // B (resident) and A (in memory)
    EXPECT_EQ(cache.stats().disk_entries, 2u);
  }
  auto e = engine();
  Generator g(*e);
  auto again = store(*e);
  EXPECT_EQ(again->entries(), 2u);
  PromptCache cache(host_cache(1u << 30, 8, 64, again));
  EXPECT_EQ(cache.stats().disk_entries, 2u);
  const GenerationRequest a2 = greedy(concat(concat(a1.prompt, ra1.tokens), ids(9, 5)));
  const GenerationResult r = run(cache, g, a2);
  EXPECT_EQ(r.reused_tokens, int(a1.prompt.size() + ra1.tokens.size() - 1));
  EXPECT_EQ(cache.stats().disk_restores, 1);
  EXPECT_EQ(r.tokens, alone(a1, a2).tokens);
}

// Budget 0: the cache does nothing at all.
TEST_P(PromptCacheTest, ZeroBudgetTurnsTheCacheOff) {
  auto e = engine();
  Generator g(*e);
  PromptCache cache(host_cache(0, 8));
  run(cache, g, greedy(ids(1, 30)));
  run(cache, g, greedy(ids(2, 30)));
  const GenerationResult back = run(cache, g, greedy(concat(ids(1, 30), ids(3, 3))));
  EXPECT_EQ(back.reused_tokens, 0);
  EXPECT_EQ(cache.stats().saves, 0);
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_THROW(PromptCache(host_cache(1, 0)), Error);
}

// An engine whose copies fail on demand (as an allocation that runs out would), around a real one.
class FailingCopies final : public Engine {
 public:
  explicit FailingCopies(Engine& inner) : inner_(inner) {}
  bool fail_saves = false, fail_restores = false;

  const ModelConfig& config() const override { return inner_.config(); }
  std::string device_name() const override { return inner_.device_name(); }
  int context_size() const override { return inner_.context_size(); }
  int position() const override { return inner_.position(); }
  std::span<const float> prefill(std::span<const int32_t> t) override { return inner_.prefill(t); }
  void prefill_all_logits(std::span<const int32_t> t, std::vector<float>& out) override {
    inner_.prefill_all_logits(t, out);
  }
  std::span<const float> decode(int32_t token) override { return inner_.decode(token); }
  void truncate(int n) override { inner_.truncate(n); }
  void fill_cache_with_noise(int n) override { inner_.fill_cache_with_noise(n); }
  uint64_t kv_bytes_per_token() const override { return inner_.kv_bytes_per_token(); }
  std::unique_ptr<EngineState> save_state() override {
    if (fail_saves) fail("out of memory (injected)");
    return inner_.save_state();
  }
  void restore_state(const EngineState& s) override {
    if (fail_restores) {
      inner_.truncate(0);  // half done, as a copy that stopped midway
      fail("out of memory (injected)");
    }
    inner_.restore_state(s);
  }

 private:
  Engine& inner_;
};

// A save or restore that fails costs the request only the reuse: it runs, from an empty cache after a
// failed restore, and generates what it generates without the cache.
TEST_P(PromptCacheTest, FailedCopiesAreSkipped) {
  auto inner = engine();
  FailingCopies e(*inner);
  Generator g(e);
  PromptCache cache(host_cache(1u << 30, 8));
  run(cache, g, greedy(ids(1, 30)));
  e.fail_saves = true;
  run(cache, g, greedy(ids(2, 30)));
  EXPECT_EQ(cache.stats().errors, 1);
  EXPECT_EQ(cache.stats().saves, 0);
  e.fail_saves = false;
  run(cache, g, greedy(ids(3, 30)));  // saves conversation 2
  const GenerationRequest b2 = greedy(concat(ids(2, 30), ids(4, 5)));
  e.fail_restores = true;
  EXPECT_EQ(cache.prepare(g, b2), 0);
  EXPECT_EQ(cache.stats().errors, 2);
  EXPECT_TRUE(g.cached_tokens().empty());
  EXPECT_EQ(e.position(), 0);
  const GenerationResult rb2 = g.run(b2);
  EXPECT_EQ(rb2.reused_tokens, 0);
  auto alone_engine = engine();
  Generator alone(*alone_engine);
  EXPECT_EQ(rb2.tokens, alone.run(b2).tokens);
}

INSTANTIATE_TEST_SUITE_P(Engines, PromptCacheTest, ::testing::Values("hf/gqa2_bf16", "hf_qwen35/fllf_text_bf16"),
                         test::fixture_case_name);

}  // namespace
}  // namespace megaqwen

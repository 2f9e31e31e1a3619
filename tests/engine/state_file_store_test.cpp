// StateFileStore (src/megaqwen/engine/state_file_store.h), the prompt cache's folder, on the CPU
// engine: it indexes only its own model's and layout's files and leaves every other file alone; it
// keeps within its byte budget by deleting the least recently used; a stored prefix of a newer
// sequence is deleted; a damaged file leaves the index when read, with an error.
#include "megaqwen/engine/state_file_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/hf_fixture.h"
#include "megaqwen/engine/create_engine.h"
#include "megaqwen/engine/state_file.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

namespace fs = std::filesystem;

class StateFileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    w_ = test::load_engine_workload(test::fixtures_dir() / "hf/gqa2_bf16");
    dir_ = fs::path(::testing::TempDir()) / ("megaqwen_store_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    engine_ = create_engine(w_.model, {.device = "cpu", .context = 128, .threads = 2, .quiet = true});
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The first n ids of the workload, prefilled and saved.
  SavedSequence sequence(size_t n, size_t from = 0) {
    engine_->truncate(0);
    const std::vector<int32_t> tokens(w_.ids.begin() + ptrdiff_t(from), w_.ids.begin() + ptrdiff_t(from + n));
    engine_->prefill(tokens);
    return SavedSequence{tokens, engine_->save_state()};
  }
  StateFileStore store(uint64_t budget = uint64_t(1) << 30) {
    return StateFileStore(dir_, budget, w_.model, engine_->state_format());
  }
  size_t files() const { return size_t(std::distance(fs::directory_iterator(dir_), fs::directory_iterator())); }

  test::EngineWorkload w_;
  fs::path dir_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(StateFileStoreTest, OwnFilesOnlyAreIndexedAndOthersLeftAlone) {
  {
    StateFileStore s = store();
    s.store(sequence(20), *engine_);
  }
  std::ofstream(dir_ / "notes.txt") << "not a state file";
  std::ofstream(dir_ / "junk.state") << "not a state file either";
  // Another model's file (its own engine and fingerprint).
  const test::EngineWorkload other = test::load_engine_workload(test::fixtures_dir() / "hf/gqa4_untied_bf16");
  auto other_engine = create_engine(other.model, {.device = "cpu", .context = 64, .threads = 2, .quiet = true});
  other_engine->prefill(std::span(other.ids).first(5));
  write_state_file(dir_ / "other.state", *other.model, *other_engine,
                   SavedSequence{std::vector<int32_t>(other.ids.begin(), other.ids.begin() + 5), other_engine->save_state()});

  StateFileStore s = store(1);  // a budget no file fits: its own file goes, the others stay
  EXPECT_EQ(s.skipped_files(), 2u);  // junk.state and other.state (notes.txt is not a .state file)
  EXPECT_EQ(s.entries(), 0u);
  EXPECT_EQ(files(), 3u);
  EXPECT_TRUE(fs::exists(dir_ / "other.state"));
}

TEST_F(StateFileStoreTest, BudgetPrefixesAndReadingBack) {
  StateFileStore probe = store();
  probe.store(sequence(30), *engine_);
  const uint64_t one = probe.bytes();
  fs::remove_all(dir_);

  StateFileStore s = store(one * 5 / 2);  // two files of 30 tokens
  s.store(sequence(30, 0), *engine_);
  s.store(sequence(30, 10), *engine_);
  s.store(sequence(30, 0), *engine_);  // already held: made the most recently used, not written again
  EXPECT_EQ(s.entries(), 2u);
  s.store(sequence(30, 20), *engine_);  // the least recently used (from 10) goes
  EXPECT_EQ(s.entries(), 2u);
  EXPECT_EQ(files(), 2u);
  EXPECT_LE(s.bytes(), one * 5 / 2);
  const std::vector<int32_t> from10(w_.ids.begin() + 10, w_.ids.begin() + 40);
  EXPECT_FALSE(s.holds(from10));
  const std::vector<int32_t> from0(w_.ids.begin(), w_.ids.begin() + 30);
  EXPECT_TRUE(s.holds(from0));

  // A longer sequence from 0 supersedes the stored one from 0 (its prefix).
  s.store(sequence(35, 0), *engine_);
  EXPECT_EQ(s.entries(), 2u);
  const auto match = s.best(w_.ids, 64);
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(match->shared, 35u);
  const SavedSequence back = s.load(match->index, *engine_);
  EXPECT_EQ(back.tokens, std::vector<int32_t>(w_.ids.begin(), w_.ids.begin() + 35));
  engine_->restore_state(*back.state);
  EXPECT_EQ(engine_->position(), 35);

  // A file damaged behind the store's back: reading it fails and it leaves the index (the file
  // stays: a failure may be the moment's).
  const auto other = s.best(std::span(w_.ids).subspan(20), 64);
  ASSERT_TRUE(other.has_value());
  for (const auto& f : fs::directory_iterator(dir_)) fs::resize_file(f.path(), 100);
  EXPECT_THROW(s.load(other->index, *engine_), Error);
  EXPECT_EQ(s.entries(), 1u);
  EXPECT_EQ(files(), 2u);
}

TEST_F(StateFileStoreTest, UnusableFolderIsAnError) {
  std::ofstream(dir_.string() + "-file") << "x";
  EXPECT_THROW(StateFileStore(dir_.string() + "-file", 1, w_.model, engine_->state_format()), Error);
  fs::remove(dir_.string() + "-file");
  EXPECT_THROW(StateFileStore(dir_, 1, w_.model, ""), Error);
}

}  // namespace
}  // namespace megaqwen

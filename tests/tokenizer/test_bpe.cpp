#include "megaqwen/tokenizer/bpe.h"

#include <gtest/gtest.h>

namespace megaqwen {
namespace {

// A toy vocabulary: bytes 'a'..'e' are ids 0..4, merged tokens from 10 on.
std::array<std::int32_t, 256> toy_bytes() {
  std::array<std::int32_t, 256> ids;
  ids.fill(-1);
  for (int c = 'a'; c <= 'e'; ++c) ids[c] = c - 'a';
  return ids;
}
constexpr std::int32_t A = 0, B = 1, C = 2, D = 3;

std::vector<std::int32_t> run(const BpeModel& m, std::string_view piece) {
  std::vector<std::int32_t> out;
  m.encode(piece, out);
  return out;
}

TEST(Bpe, LowestRankMergesFirst) {
  // rank 0: b+c -> 10 ("bc"), rank 1: a+b -> 11 ("ab"), rank 2: a+10 -> 12 ("abc")
  const BpeModel m(toy_bytes(), {{B, C, 10}, {A, B, 11}, {A, 10, 12}});
  EXPECT_EQ(run(m, "abc"), (std::vector<std::int32_t>{12}));
  EXPECT_EQ(run(m, "ab"), (std::vector<std::int32_t>{11}));
  EXPECT_EQ(run(m, "abd"), (std::vector<std::int32_t>{11, D}));
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  const BpeModel m(toy_bytes(), {{A, A, 10}});  // "aaa" -> "aa" "a", not "a" "aa"
  EXPECT_EQ(run(m, "aaa"), (std::vector<std::int32_t>{10, A}));
  EXPECT_EQ(run(m, "aaaa"), (std::vector<std::int32_t>{10, 10}));
}

TEST(Bpe, MergesFormedLaterAreFound) {
  // aa -> 10, then 10+10 -> 11: "aaaa" becomes one token after two rounds.
  const BpeModel m(toy_bytes(), {{A, A, 10}, {10, 10, 11}});
  EXPECT_EQ(run(m, "aaaa"), (std::vector<std::int32_t>{11}));
  EXPECT_EQ(run(m, "aaaaa"), (std::vector<std::int32_t>{11, A}));
}

TEST(Bpe, BytesMissingFromTheVocabularyAreDropped) {
  const BpeModel m(toy_bytes(), {{A, B, 10}});
  EXPECT_EQ(run(m, "azb"), (std::vector<std::int32_t>{10}));  // 'z' has no token; a and b meet
  EXPECT_TRUE(run(m, "zz").empty());
}

TEST(Bpe, CachedAndUncachedResultsAgree) {
  const BpeModel m(toy_bytes(), {{A, B, 10}, {10, C, 11}});
  const std::string long_piece = std::string(BpeModel::kMaxCachedKey + 3, 'd') + "abc";
  const std::string many_ids(BpeModel::kMaxCachedIds + 2, 'd');  // short, but too many ids to cache
  for (int k = 0; k < 3; ++k) {  // the second and third calls come from the cache
    EXPECT_EQ(run(m, "abcabc"), (std::vector<std::int32_t>{11, 11}));
    EXPECT_EQ(run(m, "ab"), (std::vector<std::int32_t>{10}));
    EXPECT_EQ(run(m, long_piece).size(), BpeModel::kMaxCachedKey + 4);
    EXPECT_EQ(run(m, long_piece).back(), 11);
    EXPECT_EQ(run(m, many_ids), std::vector<std::int32_t>(many_ids.size(), D));
  }
}

}  // namespace
}  // namespace megaqwen

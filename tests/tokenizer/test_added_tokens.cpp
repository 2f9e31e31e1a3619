#include "megaqwen/tokenizer/added_tokens.h"

#include <gtest/gtest.h>

namespace megaqwen {
namespace {

AddedToken token(std::int32_t id, std::string content) {
  AddedToken t;
  t.id = id;
  t.content = std::move(content);
  return t;
}

std::vector<std::pair<std::string, std::int32_t>> split(const AddedTokenMatcher& m, std::string_view text) {
  std::vector<Segment> segments;
  m.split(text, segments);
  std::vector<std::pair<std::string, std::int32_t>> out;
  for (const Segment& s : segments) out.emplace_back(std::string(s.text), s.id);
  return out;
}

AddedTokenMatcher matcher(std::vector<AddedToken> tokens) {
  std::vector<std::string> patterns;
  for (const AddedToken& t : tokens) patterns.push_back(t.content);
  return AddedTokenMatcher(std::move(tokens), std::move(patterns));
}

using Segs = std::vector<std::pair<std::string, std::int32_t>>;

TEST(AddedTokens, LeftmostLongestMatch) {
  const auto m = matcher({token(1, "<a>"), token(2, "<a><b>"), token(3, "b>")});
  EXPECT_EQ(split(m, "x<a><b>y"), (Segs{{"x", -1}, {"<a><b>", 2}, {"y", -1}}));
  EXPECT_EQ(split(m, "<a>b>"), (Segs{{"<a>", 1}, {"b>", 3}}));
  EXPECT_EQ(split(m, "plain"), (Segs{{"plain", -1}}));
  EXPECT_TRUE(split(m, "").empty());
}

TEST(AddedTokens, StripSwallowsWhitespace) {
  AddedToken mask = token(7, "<mask>");
  mask.lstrip = true;
  mask.rstrip = true;
  const auto m = matcher({mask});
  EXPECT_EQ(split(m, "I saw a  <mask> \n dog"), (Segs{{"I saw a", -1}, {"  <mask> \n ", 7}, {"dog", -1}}));
}

TEST(AddedTokens, SingleWordRejectsMatchesInsideWords) {
  AddedToken word = token(5, "cat");
  word.single_word = true;
  const auto m = matcher({word});
  EXPECT_EQ(split(m, "a cat."), (Segs{{"a ", -1}, {"cat", 5}, {".", -1}}));
  EXPECT_EQ(split(m, "concat cats"), (Segs{{"concat cats", -1}}));
  EXPECT_EQ(split(m, "écat"), (Segs{{"écat", -1}}));  // é is a word character
}

}  // namespace
}  // namespace megaqwen

#include "megaqwen/tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include "megaqwen/tokenizer/tokenizer_files.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

std::vector<std::string> split(const RegexSplitter& s, std::string_view text) {
  std::vector<std::string_view> pieces;
  s.split(text, pieces);
  return {pieces.begin(), pieces.end()};
}

using Pieces = std::vector<std::string>;

TEST(Pretokenizer, QwenPatternPieces) {
  const RegexSplitter s(kQwen2Pattern, false);
  EXPECT_EQ(split(s, "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(split(s, "I'M fine"), (Pieces{"I", "'M", " fine"}));
  EXPECT_EQ(split(s, "x'LLy"), (Pieces{"x", "'LL", "y"}));
  EXPECT_EQ(split(s, "2024"), (Pieces{"2", "0", "2", "4"}));  // \p{N} alone: one digit per piece
  EXPECT_EQ(split(s, "a  b"), (Pieces{"a", " ", " b"}));       // \s+(?!\S) leaves one space
  EXPECT_EQ(split(s, "x\r\n\r\ny"), (Pieces{"x", "\r\n\r\n", "y"}));
  EXPECT_EQ(split(s, "f(x);\n"), (Pieces{"f", "(x", ");\n"}));
  // Oniguruma folds case like Unicode: 'ſ (long s) is the contraction 's.
  EXPECT_EQ(split(s, "'\xC5\xBFt"), (Pieces{"'\xC5\xBF", "t"}));
}

// U+0085 is White_Space (so \s for Oniguruma) while U+180E is not; PCRE2's own \s differs on both.
TEST(Pretokenizer, WhitespaceFollowsOniguruma) {
  const RegexSplitter s(kQwen2Pattern, false);
  EXPECT_EQ(split(s, "a \xC2\x85\xC2\x85" "b"), (Pieces{"a", " \xC2\x85", "\xC2\x85" "b"}));
  EXPECT_EQ(split(s, "a \xE1\xA0\x8E\xE1\xA0\x8E" "b"), (Pieces{"a", " \xE1\xA0\x8E\xE1\xA0\x8E", "b"}));
}

TEST(Pretokenizer, TranslatesOnlyWhitespaceEscapes) {
  const std::string out = onig_to_pcre2(R"(\p{L}[^\s\p{N}]\S)");
  EXPECT_EQ(out.find("\\s"), std::string::npos);
  EXPECT_EQ(out.find("\\S"), std::string::npos);
  EXPECT_NE(out.find("[^\\x{09}-\\x{0D}"), std::string::npos);
  EXPECT_NE(out.find("\\p{L}"), std::string::npos);
  EXPECT_EQ(onig_to_pcre2(R"(\\s)"), R"(\\s)") << "an escaped backslash followed by s is literal";
  EXPECT_THROW(onig_to_pcre2(R"([\S])"), Error);
}

TEST(Pretokenizer, GapsBetweenMatchesArePiecesToo) {
  const RegexSplitter s("[0-9]+", false);
  EXPECT_EQ(split(s, "ab12cd345"), (Pieces{"ab", "12", "cd", "345"}));
  const RegexSplitter literal("--", true);
  EXPECT_EQ(split(literal, "a--b----"), (Pieces{"a", "--", "b", "--", "--"}));
}

TEST(Pretokenizer, LongRunsDoNotExhaustTheMatcher) {
  const RegexSplitter s(kQwen2Pattern, false);
  const std::string spaces(1 << 20, ' ');
  EXPECT_EQ(split(s, spaces + "x"), (Pieces{std::string((1 << 20) - 1, ' '), " x"}));
  const std::string letters(1 << 20, 'a');
  EXPECT_EQ(split(s, letters).size(), 1u);
}

TEST(Pretokenizer, BadPatternNamesTheProblem) {
  try {
    RegexSplitter("(unclosed", false);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not compile"), std::string::npos);
  }
}

}  // namespace
}  // namespace megaqwen

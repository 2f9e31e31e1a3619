#include "megaqwen/tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace megaqwen::utf8 {
namespace {

std::string lossy(std::string_view s) {
  std::string out;
  append_lossy(out, s);
  return out;
}

const std::string R(kReplacement);

TEST(Utf8, ValidTextIsKept) {
  const std::string text = "abc é 中 😀 \x7f";
  EXPECT_TRUE(is_valid(text));
  EXPECT_EQ(lossy(text), text);
}

// Expected values follow Rust's String::from_utf8_lossy (one U+FFFD per maximal ill-formed subpart).
TEST(Utf8, EachMaximalSubpartBecomesOneReplacement) {
  EXPECT_EQ(lossy("a\x80" "b"), "a" + R + "b");
  EXPECT_EQ(lossy("\xF0\x9F\x98"), R);                       // truncated 4-byte: one subpart
  EXPECT_EQ(lossy("\xF0\x9F\x98" "a"), R + "a");
  EXPECT_EQ(lossy("\xE0\x80\x80"), R + R + R);                // overlong: E0 must be followed by A0..BF
  EXPECT_EQ(lossy("\xED\xA0\x80"), R + R + R);                // surrogate
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), R + R + R + R);        // above U+10FFFF
  EXPECT_EQ(lossy("\xC0\xAF"), R + R);
  EXPECT_EQ(lossy("\xFF\xFE"), R + R);
  EXPECT_EQ(lossy("\xE2\x82" "\xE2\x82\xAC"), R + "\xE2\x82\xAC");
  EXPECT_FALSE(is_valid("\xC3"));
  EXPECT_FALSE(is_valid(std::string("abcdefgh\xC3", 9)));
}

TEST(Utf8, StepReportsTruncation) {
  const Step complete = next("\xE4\xB8\xAD", 0);
  EXPECT_TRUE(complete.valid);
  EXPECT_EQ(complete.length, 3u);
  const Step cut = next("\xE4\xB8", 0);
  EXPECT_FALSE(cut.valid);
  EXPECT_TRUE(cut.truncated);
  EXPECT_EQ(cut.length, 2u);
  const Step broken = next("\xE4" "a", 0);
  EXPECT_FALSE(broken.truncated);
  EXPECT_EQ(broken.length, 1u);
}

TEST(Utf8, DecodeAndAppendRoundTrip) {
  for (char32_t cp : {U'\0', U'A', U'\u00E9', U'\u4E2D', U'\U0001F600', U'\U0010FFFF'}) {
    std::string s;
    append_codepoint(s, cp);
    const Step step = next(s, 0);
    ASSERT_TRUE(step.valid);
    EXPECT_EQ(step.length, s.size());
    EXPECT_EQ(decode(s, 0, step.length), cp);
  }
}

}  // namespace
}  // namespace megaqwen::utf8

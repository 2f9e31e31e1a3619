#include "megaqwen/tokenizer/byte_level.h"

#include <gtest/gtest.h>

#include <set>

namespace megaqwen::byte_level {
namespace {

TEST(ByteLevel, KnownStandIns) {
  EXPECT_EQ(char_of_byte(' '), U'\u0120');  // 'Ġ'
  EXPECT_EQ(char_of_byte('\n'), U'\u010A');  // 'Ċ'
  EXPECT_EQ(char_of_byte('a'), U'a');
  EXPECT_EQ(char_of_byte(0x00), U'\u0100');
  EXPECT_EQ(char_of_byte(0xAD), U'\u0143');  // soft hyphen is the last non-printable
  EXPECT_EQ(char_of_byte(0xE9), U'\u00E9');
}

TEST(ByteLevel, MapIsABijection) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) seen.insert(char_of_byte(static_cast<unsigned char>(b)));
  EXPECT_EQ(seen.size(), 256u);
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(unspell(spell(all)), all);
}

TEST(ByteLevel, SpellingOutsideTheAlphabetIsLiteral) {
  EXPECT_EQ(unspell("\xC4\xA0hello"), " hello");  // "Ġhello"
  EXPECT_EQ(unspell("<|im_end|>"), "<|im_end|>");
  EXPECT_EQ(unspell("q \xC3\xA9"), "q \xC3\xA9");  // a space is not a stand-in: taken as UTF-8
}

}  // namespace
}  // namespace megaqwen::byte_level

// StringPattern against std::regex (ECMAScript grammar, regex_search: JSON Schema's unanchored
// `pattern`) on ASCII strings: random strings and strings grown one allowed character at a time; the
// formats' values checked by an independent reading (calendar dates, times, UUIDs, addresses).
#include "megaqwen/grammar/string_pattern.h"

#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <string>

#include "grammar/schema_validator.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

bool matches(const StringPattern& p, const std::string& s) {
  uint64_t state = StringPattern::kStart;
  for (unsigned char c : s) {
    state = p.step(state, c);
    if (!state) return false;
  }
  return p.accepts(state);
}

const char* kPatterns[] = {
    "^[a-z0-9_-]+$", "^\\d{3}-\\d{4}$", "^(foo|bar)+baz$", "ab*c", "^a?b{2,3}c{1,}$", "^[^\"\\\\]*$",
    "^(?:x|yz)*$", "[.]\\.", "^\\w+@\\w+\\.(com|org)$", "^[A-Fa-f0-9]{2}(:[A-Fa-f0-9]{2}){2}$", "^\\s*\\S+\\s*$",
    "^[\\d\\-+()]{3,}$", "q", "^$", "^(a|)$", "^.{2}z$", "^[^a-c]b$", "^\\x41\\u0042[\\t ]$", "^a{0,2}$",
    "^(ab|a)(bc|c)$", "^[-a]+$", "^[a-]+$", "^\\(\\)\\[\\]\\{\\}$",
};

std::string random_string(std::mt19937_64& rng, size_t max_len) {
  static const std::string alphabet = "abcqxyzABF019-_.@ \t\"\\:+()[]{}\n";
  std::string s(rng() % (max_len + 1), ' ');
  for (char& c : s) c = alphabet[rng() % alphabet.size()];
  return s;
}

TEST(StringPattern, AgreesWithStdRegexOnRandomStrings) {
  std::mt19937_64 rng(3);
  for (const char* source : kPatterns) {
    const StringPattern p = StringPattern::compile(source, "pattern");
    const std::regex re(source, std::regex::ECMAScript);
    for (int i = 0; i < 3000; ++i) {
      const std::string s = random_string(rng, 8);
      ASSERT_EQ(matches(p, s), std::regex_search(s, re)) << source << " on \"" << s << "\"";
    }
  }
}

// Grows a string one allowed character (codes [lo, hi)) at a time, stopping at random where the
// pattern accepts, always once past soft_limit characters, and giving up at hard_limit.
struct Grown {
  std::string text;
  bool accepted = false;
  bool stuck = false;  // no character fits and the pattern does not accept
};
Grown grow(const StringPattern& p, std::mt19937_64& rng, int lo, int hi, size_t soft_limit, size_t hard_limit) {
  Grown g;
  uint64_t state = StringPattern::kStart;
  while (g.text.size() < hard_limit) {
    if (p.accepts(state) && (rng() % 4 == 0 || g.text.size() > soft_limit)) break;
    std::vector<char> fits;
    for (int c = lo; c < hi; ++c)
      if (p.step(state, uint32_t(c))) fits.push_back(char(c));
    if (fits.empty()) break;
    const char c = fits[rng() % fits.size()];
    state = p.step(state, uint8_t(c));
    g.text += c;
  }
  g.accepted = p.accepts(state);
  g.stuck = !g.accepted && g.text.size() < hard_limit;
  return g;
}

// Every state can still match (never stuck), and every accepted string is a match.
TEST(StringPattern, EveryPrefixItAllowsCompletesToAMatch) {
  std::mt19937_64 rng(5);
  for (const char* source : kPatterns) {
    const StringPattern p = StringPattern::compile(source, "pattern");
    const std::regex re(source, std::regex::ECMAScript);
    for (int walk = 0; walk < 200; ++walk) {
      const Grown g = grow(p, rng, 0, 128, 30, 40);
      ASSERT_FALSE(g.stuck) << source << ": stuck after \"" << g.text << "\"";
      if (g.accepted) {
        EXPECT_TRUE(std::regex_search(g.text, re)) << source << " accepted \"" << g.text << "\"";
      }
    }
  }
}

TEST(StringPattern, CountsCodePointsAndAllowsRanges) {
  const StringPattern p = StringPattern::compile("^[é-ë]{2}$", "pattern");
  uint64_t s = p.step(StringPattern::kStart, 0xE9);
  ASSERT_NE(s, 0u);
  EXPECT_TRUE(p.allows_any(s, 0xE0, 0xEF));
  EXPECT_FALSE(p.allows_any(s, 0x100, 0x7FF));
  EXPECT_TRUE(p.accepts(p.step(s, 0xEB)));
  EXPECT_EQ(p.step(s, 0xEC), 0u);
  // '.' is anything but a line terminator; surrogates never match.
  const StringPattern dot = StringPattern::compile("^.$", "pattern");
  EXPECT_TRUE(dot.accepts(dot.step(StringPattern::kStart, 0x1F600)));
  EXPECT_EQ(dot.step(StringPattern::kStart, '\n'), 0u);
  EXPECT_FALSE(dot.allows_any(StringPattern::kStart, 0xD800, 0xDFFF));
}

TEST(StringPattern, RefusesWhatItCannotGenerate) {
  for (const char* bad : {"(a)\\1", "a(?=b)", "\\bword", "\\p{L}", "a|^b", "a$b", "(", "a)", "[a", "a{3,1}", "*a",
                          "[z-a]", "\\", "a{2000}", "[^\\s\\S]", "\\q"})
    EXPECT_THROW(StringPattern::compile(bad, "p"), Error) << bad;
}

TEST(StringPattern, FormatsProduceOnlyValidValues) {
  std::mt19937_64 rng(9);
  for (const char* format : {"date", "time", "date-time", "uuid", "email", "ipv4"}) {
    const auto regex = StringPattern::format_regex(format);
    ASSERT_TRUE(regex) << format;
    const StringPattern p = StringPattern::compile(*regex, format);
    for (int walk = 0; walk < 300; ++walk) {
      const Grown g = grow(p, rng, 32, 127, 40, 5000);
      ASSERT_TRUE(g.accepted) << format << " stuck or endless: " << g.text;
      EXPECT_TRUE(test::format_ok(format, g.text)) << format << ": " << g.text;
    }
  }
  EXPECT_FALSE(StringPattern::format_regex("uri"));
}

}  // namespace
}  // namespace megaqwen

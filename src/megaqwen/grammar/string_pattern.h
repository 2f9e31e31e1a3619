// StringPattern: a JSON Schema `pattern` (or a `format` given as one) compiled for generation: a
// position automaton (Glushkov's: one state per character class of the regular expression, no empty
// moves) over code points, whose state set fits in 64 bits, so a string frame of the recognizer
// carries it. Every state reached can still complete a match (each position lies on some matching
// word), and the recognizer asks before a multi-byte character or an escape whether any character
// it could still become is allowed, so no prefix dead-ends.
//
// The regular expressions are ECMA-262's (JSON Schema's dialect), a subset: literals and escapes,
// classes [...] with ranges and negation, \d \w \s and their negations, '.', groups (capturing or
// (?:...)), alternation, the quantifiers * + ? {n} {n,} {n,m} (lazy forms read alike), ^ at the start
// and $ at the end. Backreferences, lookaround, word boundaries and \p{...} are refused. Without ^
// (or $) the match may start (or end) anywhere, as JSON Schema's `pattern` means.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace megaqwen {

class StringPattern {
 public:
  static constexpr int kMaxPositions = 63;  // bit 63 is the state before the first character
  static constexpr uint64_t kStart = uint64_t(1) << 63;

  // Throws Error (naming `path`) for what it cannot compile.
  static StringPattern compile(std::string_view regex, const std::string& path);
  // The regular expression generation uses for a JSON Schema `format`, or nullopt when that format
  // is not supported. Each admits only valid values (date excludes February 29th, time requires an
  // offset and has no leap second): what they produce validates everywhere.
  static std::optional<std::string> format_regex(std::string_view format);

  // The state after code point cp (0: no match can continue).
  uint64_t step(uint64_t state, uint32_t cp) const;
  // Whether some code point in [lo, hi] can come next.
  bool allows_any(uint64_t state, uint32_t lo, uint32_t hi) const;
  // A character read in UTF-8 with `more` continuation bytes still to come and `prefix` the bits of
  // its code point so far: with none to come, the state after that code point; else the state kept
  // while some code point the prefix can become is allowed. 0: no match can continue.
  uint64_t step_partial(uint64_t state, uint32_t prefix, int more) const;
  bool accepts(uint64_t state) const;
  int positions() const { return int(classes_.size()); }

 private:
  using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // sorted, disjoint, inclusive
  static bool contains(const Ranges& r, uint32_t cp);
  static bool intersects(const Ranges& r, uint32_t lo, uint32_t hi);
  uint64_t next_positions(uint64_t state) const;

  std::vector<Ranges> classes_;    // per position
  std::vector<uint64_t> follow_;   // per position
  uint64_t first_ = 0, last_ = 0;
  bool nullable_ = false;
  friend class PatternParser;
};

}  // namespace megaqwen

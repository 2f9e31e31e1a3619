// UTF-8 rules the tokenizer needs: stepping over one character, and the lossy repair that Rust's
// String::from_utf8_lossy applies (each maximal ill-formed subpart becomes one U+FFFD). HF tokenizers
// uses that repair when decoding, so encode (on invalid input) and decode both use it here too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace megaqwen::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// One step over the bytes at s[i]: a whole character, or the maximal ill-formed subpart there.
struct Step {
  std::uint32_t length;  // bytes covered (>= 1)
  bool valid;            // a well-formed character
  bool truncated;        // ill-formed only because the input ended inside the character
};
Step next(std::string_view s, std::size_t i);

// The code point of the well-formed character of `length` bytes at s[i].
char32_t decode(std::string_view s, std::size_t i, std::uint32_t length);

void append_codepoint(std::string& out, char32_t cp);

bool is_valid(std::string_view s);

// Appends `bytes` with each ill-formed subpart replaced by U+FFFD.
void append_lossy(std::string& out, std::string_view bytes);

}  // namespace megaqwen::utf8

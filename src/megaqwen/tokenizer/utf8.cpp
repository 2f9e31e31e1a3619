#include "megaqwen/tokenizer/utf8.h"

#include <cstring>

namespace megaqwen::utf8 {

Step next(std::string_view s, std::size_t i) {
  const auto b = static_cast<std::uint8_t>(s[i]);
  if (b < 0x80) return {1, true, false};
  // Well-formed sequences per Unicode Table 3-7: the lead byte fixes the length and the
  // allowed range of the second byte (this excludes overlongs, surrogates and > U+10FFFF).
  int continuation = 0;
  std::uint8_t lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    continuation = 1;
  } else if (b == 0xE0) {
    continuation = 2, lo = 0xA0;
  } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) {
    continuation = 2;
  } else if (b == 0xED) {
    continuation = 2, hi = 0x9F;
  } else if (b == 0xF0) {
    continuation = 3, lo = 0x90;
  } else if (b >= 0xF1 && b <= 0xF3) {
    continuation = 3;
  } else if (b == 0xF4) {
    continuation = 3, hi = 0x8F;
  } else {
    return {1, false, false};
  }
  std::size_t j = i + 1;
  for (int k = 0; k < continuation; ++k, ++j) {
    if (j >= s.size()) return {static_cast<std::uint32_t>(j - i), false, true};
    const auto c = static_cast<std::uint8_t>(s[j]);
    if (c < lo || c > hi) return {static_cast<std::uint32_t>(j - i), false, false};
    lo = 0x80, hi = 0xBF;
  }
  return {static_cast<std::uint32_t>(continuation + 1), true, false};
}

char32_t decode(std::string_view s, std::size_t i, std::uint32_t length) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(s.data() + i);
  switch (length) {
    case 1: return p[0];
    case 2: return (char32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3: return (char32_t(p[0] & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    default:
      return (char32_t(p[0] & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
             (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  }
}

void append_codepoint(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Skips a run of ASCII eight bytes at a time; most text is mostly ASCII.
static std::size_t skip_ascii(std::string_view s, std::size_t i) {
  while (i + 8 <= s.size()) {
    std::uint64_t word;
    std::memcpy(&word, s.data() + i, 8);
    if (word & 0x8080808080808080ull) break;
    i += 8;
  }
  while (i < s.size() && static_cast<std::uint8_t>(s[i]) < 0x80) ++i;
  return i;
}

bool is_valid(std::string_view s) {
  std::size_t i = skip_ascii(s, 0);
  while (i < s.size()) {
    const Step step = next(s, i);
    if (!step.valid) return false;
    i = skip_ascii(s, i + step.length);
  }
  return true;
}

void append_lossy(std::string& out, std::string_view bytes) {
  std::size_t i = 0;
  while (i < bytes.size()) {
    const std::size_t ascii_end = skip_ascii(bytes, i);
    out.append(bytes.data() + i, ascii_end - i);
    i = ascii_end;
    if (i == bytes.size()) break;
    const Step step = next(bytes, i);
    if (step.valid) {
      out.append(bytes.data() + i, step.length);
    } else {
      out += kReplacement;
    }
    i += step.length;
  }
}

}  // namespace megaqwen::utf8

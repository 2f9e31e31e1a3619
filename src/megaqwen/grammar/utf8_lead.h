// Strict UTF-8 read a byte at a time, for recognizers that must know after each byte whether the
// text can still be valid: a lead byte says how many continuation bytes follow, which range the
// first of them must lie in (this is where overlong forms, surrogates and code points past U+10FFFF
// are excluded), and which code points the sequence can still become.
#pragma once

#include <cstdint>
#include <utility>

namespace megaqwen {

// A UTF-8 lead byte: continuation bytes to come (0: not a lead), the range code of the first one
// (utf8_continuation_range), its payload bits, and the code points the sequence can still become.
struct Utf8Lead {
  uint16_t more = 0;
  uint32_t range = 0, payload = 0, lo = 0, hi = 0;
};

inline Utf8Lead utf8_lead(uint8_t c) {
  if (c >= 0xC2 && c <= 0xDF) return {1, 0, c & 0x1Fu, (c & 0x1Fu) << 6, ((c & 0x1Fu) << 6) + 0x3F};
  if (c == 0xE0) return {2, 1, 0, 0x800, 0xFFF};
  if (c == 0xED) return {2, 2, 0xD, 0xD000, 0xD7FF};
  if (c >= 0xE1 && c <= 0xEF) return {2, 0, c & 0xFu, (c & 0xFu) << 12, ((c & 0xFu) << 12) + 0xFFF};
  if (c == 0xF0) return {3, 3, 0, 0x10000, 0x3FFFF};
  if (c >= 0xF1 && c <= 0xF3) return {3, 0, c & 0x7u, (c & 0x7u) << 18, ((c & 0x7u) << 18) + 0x3FFFF};
  if (c == 0xF4) return {3, 4, 4, 0x100000, 0x10FFFF};
  return {};
}

// Range codes: 0 any continuation, then the first continuation after E0, ED, F0, F4.
inline std::pair<uint8_t, uint8_t> utf8_continuation_range(uint32_t code) {
  switch (code) {
    case 1: return {0xA0, 0xBF};
    case 2: return {0x80, 0x9F};
    case 3: return {0x90, 0xBF};
    case 4: return {0x80, 0x8F};
  }
  return {0x80, 0xBF};
}

}  // namespace megaqwen

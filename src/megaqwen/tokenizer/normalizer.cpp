#include "megaqwen/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "megaqwen/tokenizer/utf8.h"
#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

// Code points below this get a table entry; rarer planes (CJK extensions B+, tags, private use)
// always take the utf8proc path.
constexpr char32_t kTableLimit = 0x30000;

// inert[cp]: NFC never changes cp nor merges it with a neighbour (see is_trivially_nfc).
std::vector<bool> build_inert_table() {
  std::vector<bool> second(kTableLimit, false);
  std::vector<bool> inert(kTableLimit, false);
  utf8proc_int32_t buf[32];
  // Pass 1: everything after the first character of a canonical decomposition may be the second
  // half of a composition (this covers Hangul jamo V and T, which utf8proc decomposes too).
  for (char32_t cp = 0; cp < kTableLimit; ++cp) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    int last_boundclass = 0;
    const auto n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buf, 32,
                                           UTF8PROC_DECOMPOSE, &last_boundclass);
    for (utf8proc_ssize_t k = 1; k < n; ++k) {
      if (static_cast<char32_t>(buf[k]) < kTableLimit) second[buf[k]] = true;
    }
  }
  // Pass 2: inert = class 0, not a second, NFC(cp) == cp, and its decomposition starts with a
  // class-0 non-second character (so it cannot join the character before it either).
  for (char32_t cp = 0; cp < kTableLimit; ++cp) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    const utf8proc_property_t* prop = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
    if (prop->combining_class != 0 || second[cp]) continue;
    int last_boundclass = 0;
    auto n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buf, 32,
                                     UTF8PROC_DECOMPOSE, &last_boundclass);
    if (n <= 0) continue;
    const auto first = static_cast<char32_t>(buf[0]);
    if (first >= kTableLimit || second[first] ||
        utf8proc_get_property(buf[0])->combining_class != 0) {
      continue;
    }
    n = utf8proc_normalize_utf32(buf, n, static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_STABLE));
    inert[cp] = (n == 1 && static_cast<char32_t>(buf[0]) == cp);
  }
  return inert;
}

const std::vector<bool>& inert_table() {
  static const std::vector<bool> table = build_inert_table();
  return table;
}

// Code point at text[i] (valid UTF-8) and its length.
char32_t char_at(std::string_view text, std::size_t i, std::uint32_t& length) {
  if (static_cast<unsigned char>(text[i]) < 0x80) {
    length = 1;
    return static_cast<unsigned char>(text[i]);
  }
  length = utf8::next(text, i).length;
  return utf8::decode(text, i, length);
}

bool is_inert(const std::vector<bool>& inert, char32_t cp) { return cp < kTableLimit && inert[cp]; }

void append_utf8proc_nfc(std::string_view text, std::string& out) {
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &result,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("NFC normalization failed: {}", utf8proc_errmsg(n));
  out.append(reinterpret_cast<const char*>(result), static_cast<std::size_t>(n));
  std::free(result);
}

}  // namespace

bool is_trivially_nfc(std::string_view text) {
  const std::vector<bool>& inert = inert_table();
  for (std::size_t i = 0; i < text.size();) {
    std::uint32_t length = 0;
    if (!is_inert(inert, char_at(text, i, length))) return false;
    i += length;
  }
  return true;
}

// NFC never acts across the boundary before an inert character, so only the stretches around
// non-inert characters go through utf8proc: from the character before the first non-inert one
// (it may compose with it) up to the next inert character.
void append_nfc(std::string_view text, std::string& out) {
  const std::vector<bool>& inert = inert_table();
  std::size_t copied = 0;    // text[0, copied) is already in `out`
  std::size_t previous = 0;  // start of the character before i
  for (std::size_t i = 0; i < text.size();) {
    std::uint32_t length = 0;
    if (is_inert(inert, char_at(text, i, length))) {
      previous = i;
      i += length;
      continue;
    }
    const std::size_t start = std::max(copied, previous);
    std::size_t end = i + length;
    while (end < text.size() && !is_inert(inert, char_at(text, end, length))) end += length;
    out.append(text.substr(copied, start - copied));
    append_utf8proc_nfc(text.substr(start, end - start), out);
    copied = previous = i = end;
  }
  out.append(text.substr(copied));
}

}  // namespace megaqwen

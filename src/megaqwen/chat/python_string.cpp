#include "megaqwen/chat/python_string.h"

#include <array>

namespace megaqwen::python {
namespace {

// The code points for which Python's str.isspace() is true (bidirectional class WS, B or S, or
// category Zs), as UTF-8.
constexpr std::array<std::string_view, 29> kWhitespace = {
    "\t", "\n", "\v", "\f", "\r", "\x1c", "\x1d", "\x1e", "\x1f", " ",
    "\xc2\x85",                                                         // U+0085
    "\xc2\xa0",                                                         // U+00A0
    "\xe1\x9a\x80",                                                     // U+1680
    "\xe2\x80\x80", "\xe2\x80\x81", "\xe2\x80\x82", "\xe2\x80\x83",     // U+2000..U+2003
    "\xe2\x80\x84", "\xe2\x80\x85", "\xe2\x80\x86", "\xe2\x80\x87",     // U+2004..U+2007
    "\xe2\x80\x88", "\xe2\x80\x89", "\xe2\x80\x8a",                     // U+2008..U+200A
    "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf",                     // U+2028, U+2029, U+202F
    "\xe2\x81\x9f",                                                     // U+205F
    "\xe3\x80\x80",                                                     // U+3000
};

// Length of the whitespace code point at the start (or end) of s, 0 if there is none.
std::size_t leading_space(std::string_view s) {
  for (const auto space : kWhitespace) {
    if (s.starts_with(space)) return space.size();
  }
  return 0;
}
std::size_t trailing_space(std::string_view s) {
  for (const auto space : kWhitespace) {
    if (s.ends_with(space)) return space.size();
  }
  return 0;
}

}  // namespace

std::string_view lstrip(std::string_view s, std::string_view chars) {
  const std::size_t begin = s.find_first_not_of(chars);
  return begin == std::string_view::npos ? std::string_view{} : s.substr(begin);
}

std::string_view rstrip(std::string_view s, std::string_view chars) {
  const std::size_t last = s.find_last_not_of(chars);
  return last == std::string_view::npos ? std::string_view{} : s.substr(0, last + 1);
}

std::string_view strip(std::string_view s, std::string_view chars) { return rstrip(lstrip(s, chars), chars); }

std::string_view strip_whitespace(std::string_view s) {
  while (const std::size_t n = leading_space(s)) s.remove_prefix(n);
  while (const std::size_t n = trailing_space(s)) s.remove_suffix(n);
  return s;
}

std::string_view split_first(std::string_view s, std::string_view sep) {
  const std::size_t at = s.find(sep);
  return at == std::string_view::npos ? s : s.substr(0, at);
}

std::string_view split_last(std::string_view s, std::string_view sep) {
  const std::size_t at = s.rfind(sep);
  return at == std::string_view::npos ? s : s.substr(at + sep.size());
}

}  // namespace megaqwen::python

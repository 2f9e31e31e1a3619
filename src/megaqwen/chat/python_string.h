// The few Python str methods the chat templates call, on UTF-8 text. Every separator and strip set
// they use is ASCII, so byte-wise search on UTF-8 gives the same result as Python's code-point search;
// only whitespace stripping (Jinja's `trim`) has to know Unicode.
#pragma once

#include <string>
#include <string_view>

namespace megaqwen::python {

// s.lstrip(chars), s.rstrip(chars), s.strip(chars) for an ASCII set of characters.
std::string_view lstrip(std::string_view s, std::string_view chars);
std::string_view rstrip(std::string_view s, std::string_view chars);
std::string_view strip(std::string_view s, std::string_view chars);

// s.strip() with no argument (Jinja's `trim` filter): strips every code point str.isspace() accepts,
// the Unicode ones (U+00A0, U+3000, ...) included.
std::string_view strip_whitespace(std::string_view s);

// s.split(sep)[0] and s.split(sep)[-1], for separators that cannot overlap themselves ("<think>").
std::string_view split_first(std::string_view s, std::string_view sep);
std::string_view split_last(std::string_view s, std::string_view sep);

}  // namespace megaqwen::python

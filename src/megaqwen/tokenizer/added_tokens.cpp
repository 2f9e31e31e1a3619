#include "megaqwen/tokenizer/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>

#include "megaqwen/tokenizer/utf8.h"

namespace megaqwen {
namespace {

// Unicode White_Space, the meaning of \s in the Rust regexes HF uses for lstrip/rstrip.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Rust's Unicode \w: letters, marks, decimal digits, connector punctuation, letter numbers and
// the two join controls. (Rust also counts the few Other_Alphabetic symbols such as circled
// letters; single_word tokens next to those are the only place this could differ.)
bool is_word_char(char32_t c) {
  if (c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The last character before `end`; text is valid UTF-8.
char32_t char_before(std::string_view text, std::size_t end, std::size_t& start) {
  start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return utf8::decode(text, start, static_cast<std::uint32_t>(end - start));
}

char32_t char_at(std::string_view text, std::size_t i, std::size_t& length) {
  length = utf8::next(text, i).length;
  return utf8::decode(text, i, static_cast<std::uint32_t>(length));
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns) {
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    if (!patterns[k].empty()) entries_.push_back(Entry{std::move(patterns[k]), std::move(tokens[k])});
  }
  std::stable_sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
    const auto fa = static_cast<unsigned char>(a.pattern[0]), fb = static_cast<unsigned char>(b.pattern[0]);
    return fa != fb ? fa < fb : a.pattern.size() > b.pattern.size();
  });
  std::size_t k = 0;
  for (int b = 0; b < 256; ++b) {
    first_[b] = static_cast<std::uint32_t>(k);
    while (k < entries_.size() && static_cast<unsigned char>(entries_[k].pattern[0]) == b) ++k;
  }
  first_[256] = static_cast<std::uint32_t>(k);
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out, bool special_as_text) const {
  std::size_t emitted = 0;  // text before this offset is already in `out`
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto b = static_cast<unsigned char>(text[pos]);
    const Entry* match = nullptr;
    for (std::uint32_t k = first_[b]; k < first_[b + 1]; ++k) {
      if (text.substr(pos).starts_with(entries_[k].pattern)) {
        match = &entries_[k];  // longest first, so the first hit is the leftmost-longest match
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    std::size_t start = pos, stop = pos + match->pattern.size();
    pos = stop;  // like Aho-Corasick's iterator, a rejected match is still consumed
    const AddedToken& token = match->token;
    if (token.special && special_as_text) continue;
    if (token.single_word) {
      std::size_t unused = 0;
      const bool word_before = start > 0 && is_word_char(char_before(text, start, unused));
      const bool word_after = stop < text.size() && is_word_char(char_at(text, stop, unused));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      // Whitespace already given to an earlier match stays with it.
      while (start > emitted) {
        std::size_t prev = 0;
        if (!is_white_space(char_before(text, start, prev))) break;
        start = prev;
      }
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        std::size_t length = 0;
        if (!is_white_space(char_at(text, stop, length))) break;
        stop += length;
      }
      pos = stop;
    }
    if (start > emitted) out.push_back(Segment{text.substr(emitted, start - emitted), -1});
    out.push_back(Segment{text.substr(start, stop - start), token.id});
    emitted = stop;
  }
  if (emitted < text.size()) out.push_back(Segment{text.substr(emitted), -1});
}

}  // namespace megaqwen

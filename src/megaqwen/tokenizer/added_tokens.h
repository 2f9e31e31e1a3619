// Added tokens (tokenizer.json `added_tokens`): strings such as <|im_start|> that are cut out of the
// text as whole tokens before normalization and pre-tokenization. Matching follows HF's
// AddedVocabulary: leftmost-longest over all contents; `single_word` rejects a match touching a word
// character; `lstrip`/`rstrip` swallow the whitespace around it; `normalized` tokens are matched
// in the NFC text of each remaining segment instead of the raw text.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace megaqwen {

struct AddedToken {
  std::int32_t id = -1;
  std::string content;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

struct Segment {
  std::string_view text;
  std::int32_t id;  // the added token this segment is, or -1 for ordinary text
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[k]` is the string to find for `tokens[k]` (its content, or NFC of it).
  AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns);

  bool empty() const { return entries_.empty(); }

  // Appends the segments of `text` (valid UTF-8) to `out`; together they cover `text`. With
  // `special_as_text`, a special token's match stays ordinary text (and is consumed, as HF's
  // `encode_special_tokens` skips it): only the non-special added tokens are cut out.
  void split(std::string_view text, std::vector<Segment>& out, bool special_as_text = false) const;

 private:
  struct Entry {
    std::string pattern;
    AddedToken token;
  };
  std::vector<Entry> entries_;             // sorted by first byte, then longest pattern first
  std::array<std::uint32_t, 257> first_{};  // entries_[first_[b] .. first_[b+1]) start with byte b
};

}  // namespace megaqwen

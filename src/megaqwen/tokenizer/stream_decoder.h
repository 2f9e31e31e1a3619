// StreamDecoder: turns a stream of token ids into text without ever printing half a character.
// One token can end in the middle of a UTF-8 character (an emoji is often 2-4 byte tokens), so
// decoding token by token would print garbage; this holds back the bytes of an unfinished
// character until the token that completes it arrives. The concatenation of everything push() and
// flush() return equals Tokenizer::decode of all the ids.
#pragma once

#include <cstdint>
#include <string>

#include "megaqwen/tokenizer/tokenizer.h"

namespace megaqwen {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer);

  // The text completed by this token (may be empty). Throws Error on an unknown id.
  std::string push(std::int32_t id);
  // Whatever is held back, with an unfinished character replaced by U+FFFD; resets the stream.
  std::string flush();

 private:
  Tokenizer tokenizer_;  // cheap copy: shares the implementation
  std::string pending_;  // bytes of a character not yet complete
};

}  // namespace megaqwen

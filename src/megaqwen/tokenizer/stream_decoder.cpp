#include "megaqwen/tokenizer/stream_decoder.h"

#include "megaqwen/tokenizer/utf8.h"

namespace megaqwen {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

std::string StreamDecoder::push(std::int32_t id) {
  pending_ += tokenizer_.token_bytes(id);
  // Everything up to a trailing, still-completable character is final: a character that is
  // already ill-formed becomes U+FFFD now, exactly as the lossy repair of the whole text would.
  std::size_t i = 0;
  std::string out;
  while (i < pending_.size()) {
    const utf8::Step step = utf8::next(pending_, i);
    if (step.truncated) break;
    if (step.valid) {
      out.append(pending_, i, step.length);
    } else {
      out += utf8::kReplacement;
    }
    i += step.length;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  utf8::append_lossy(out, pending_);
  pending_.clear();
  return out;
}

}  // namespace megaqwen

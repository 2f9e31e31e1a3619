// libFuzzer target: encode arbitrary bytes with the real Qwen3 tokenizer, decode the ids, and check
// the invariants that must hold for any input: no crash, every id decodes, the decoded text is
// valid UTF-8, and (for input that is valid NFC-stable UTF-8) decoding gives the input back; the
// same with special tokens kept as text, which must then yield no special id.
// The tokenizer folder comes from $MEGAQWEN_TOKENIZER_DIR, else the shared Qwen3 folder.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "megaqwen/tokenizer/normalizer.h"
#include "megaqwen/tokenizer/stream_decoder.h"
#include "megaqwen/tokenizer/tokenizer.h"
#include "megaqwen/tokenizer/utf8.h"

namespace {

const megaqwen::Tokenizer& tokenizer() {
  static const megaqwen::Tokenizer t = [] {
    const char* dir = std::getenv("MEGAQWEN_TOKENIZER_DIR");
    return megaqwen::Tokenizer::load(dir != nullptr ? dir : "/work/shared/models/qwen3-0.6b");
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const megaqwen::Tokenizer& tok = tokenizer();
  const auto ids = tok.encode(input);
  const std::string text = tok.decode(ids);
  if (!megaqwen::utf8::is_valid(text)) std::abort();

  megaqwen::StreamDecoder stream(tok);
  std::string streamed;
  for (std::int32_t id : ids) streamed += stream.push(id);
  streamed += stream.flush();
  if (streamed != text) std::abort();

  // Added tokens are cut before NFC, so the round trip is only promised for NFC-stable text.
  const bool round_trips = megaqwen::utf8::is_valid(input) && megaqwen::is_trivially_nfc(input);
  if (round_trips && text != input) std::abort();

  // Special tokens kept as text (perplexity's encoding): no special id comes out, and the same
  // round trip holds.
  const auto as_text = tok.encode(input, megaqwen::SpecialTokens::kAsText);
  for (std::int32_t id : as_text) {
    if (tok.is_special(id)) std::abort();
  }
  if (round_trips && tok.decode(as_text) != input) std::abort();
  return 0;
}

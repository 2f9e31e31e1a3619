// Tokenizer: Qwen's byte-level BPE, id-for-id identical to HF `tokenizers` on the same files.
//
// encode: (1) invalid UTF-8 is first repaired as Rust's from_utf8_lossy does (each ill-formed
// subpart -> U+FFFD), since HF only ever sees valid strings; (2) added tokens are cut out of the raw
// text; (3) each remaining segment is NFC-normalized, (4) split by the pre-tokenizer regex, and
// (5) each piece's UTF-8 bytes are BPE-merged. No BOS/EOS is added.
// decode: the bytes of each token concatenated, then the same lossy repair; special tokens are
// included (nothing is skipped). Copies share one immutable implementation; all methods are
// safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace megaqwen {

// How encode treats the text of a special added token (<|im_start|>, <|endoftext|>, ...) found in
// its input: as that token (HF's default, what rendered chat prompts need), or as ordinary text (HF's
// `split_special_tokens=True`, llama.cpp's `parse_special=false`: scoring a document that mentions
// them). Non-special added tokens (<think>, <tool_call>) are cut out either way.
enum class SpecialTokens { kParse, kAsText };

class Tokenizer {
 public:
  // Loads from a model folder: tokenizer.json if present, else vocab.json + merges.txt
  // (+ tokenizer_config.json for added tokens and `pretokenize_regex`). Throws Error naming the
  // file and problem.
  static Tokenizer load(const std::filesystem::path& model_dir);

  std::vector<std::int32_t> encode(std::string_view text, SpecialTokens special = SpecialTokens::kParse) const;
  // Throws Error on an id that has no token (negative, >= vocab_size(), or a gap).
  std::string decode(std::span<const std::int32_t> ids) const;
  // Raw bytes of one token (after undoing the byte-level map); throws Error like decode.
  std::string_view token_bytes(std::int32_t id) const;
  // As token_bytes, but empty for an id with no token instead of an error: models pad their
  // embedding past the vocabulary (Qwen3: 151936 rows for 151669 tokens) and may sample such ids.
  std::string_view sampled_bytes(std::int32_t id) const noexcept;
  // The token as the vocabulary spells it (HF's convert_ids_to_tokens: "Ġthe", "<|im_end|>");
  // throws Error like decode.
  std::string token_spelling(std::int32_t id) const;
  // Exact lookup of a token as spelled in the vocabulary (byte-level form, e.g. "Ġthe") or of an
  // added token's content (e.g. "<|im_end|>"); added tokens win, as in HF's token_to_id.
  std::optional<std::int32_t> token_id(std::string_view token) const;
  std::int32_t vocab_size() const;  // 1 + highest id
  bool is_special(std::int32_t id) const;
  // An added token (tokenizer.json added_tokens: <|im_end|>, <think>, ...), special or not.
  bool is_added(std::int32_t id) const;

  // The pre-tokenizer pattern in use (as read from the files).
  const std::string& pretokenizer_pattern() const;

 private:
  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace megaqwen

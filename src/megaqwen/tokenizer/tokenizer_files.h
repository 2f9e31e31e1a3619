// Reading a tokenizer description from a model folder, in either of the two published forms:
// tokenizer.json (HF tokenizers), or vocab.json + merges.txt + tokenizer_config.json (the files
// transformers' Qwen2Tokenizer reads). Both give the same TokenizerSpec; checks name file and field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "megaqwen/tokenizer/added_tokens.h"

namespace megaqwen {

// The pre-tokenizer pattern of transformers' Qwen2Tokenizer, used when a two-file folder's
// tokenizer_config.json has no `pretokenize_regex`.
inline constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct TokenizerSpec {
  std::vector<std::pair<std::string, std::int32_t>> vocab;    // byte-level spelling -> id
  std::vector<std::pair<std::string, std::string>> merges;    // in rank order, spellings
  std::vector<AddedToken> added_tokens;
  std::string pattern;          // the Split pre-tokenizer's pattern
  bool pattern_is_literal = false;
  bool nfc = true;              // normalizer is NFC (else none)
  std::filesystem::path source; // the file the vocabulary came from, for error messages
};

TokenizerSpec read_tokenizer_json(const std::filesystem::path& file);
TokenizerSpec read_vocab_and_merges(const std::filesystem::path& model_dir);

}  // namespace megaqwen

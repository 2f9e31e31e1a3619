// State files: a saved sequence (its token ids and the engine's copy of the cache that holds them) on
// disk, so a long prompt prefilled once is not prefilled again by the next process: `megaqwen
// generate --prompt-cache FILE`, `megaqwen chat --prompt-cache FILE` (llama.cpp's --prompt-cache).
//
// The file is safetensors (model/safetensors.h parses and validates its header), with metadata
//   format "megaqwen-state", version "1",
//   state_format       the engine's layout (Engine::state_format: "cpu-qwen3-f32", "cuda-qwen3-bf16", ...),
//   model_fingerprint  model_fingerprint() of the weights and config that made the cache,
//   model              the model folder's name (for messages only),
// the tensor "tokens" (i32 [n]) and the engine's tensors (Engine::state_tensors). A file is read back
// only by an engine of the same state format over the same model, and only if it fits its context;
// anything else is refused by name, never decoded into garbage.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "megaqwen/engine/generator.h"

namespace megaqwen {

struct Model;
class MappedFile;
struct SafetensorsHeader;

// Writes `sequence` (saved by `engine`, which runs `model`) to `path`: to a temporary file beside it,
// renamed over `path` once complete, so a crash or a full disk never leaves a half-written file
// under that name.
void write_state_file(const std::filesystem::path& path, const Model& model, const Engine& engine,
                      const SavedSequence& sequence);

// An opened state file: the header is parsed and checked, the tensors stay mapped until load().
class StateFile {
 public:
  // Throws Error naming the file and what is wrong (not a state file, another version, a bad header).
  static StateFile open(const std::filesystem::path& path);
  StateFile(StateFile&&) noexcept;
  StateFile& operator=(StateFile&&) noexcept;
  ~StateFile();

  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::string& state_format() const { return state_format_; }
  const std::string& model_name() const { return model_name_; }
  const std::string& model_fingerprint() const { return model_fingerprint_; }
  uint64_t bytes() const;  // the file's size

  // The saved sequence, for `engine` running `model`: refused (Error naming the difference) when the
  // file was made by another kind of engine, from another model, holds more tokens than the context,
  // a token outside the vocabulary, or tensors the engine does not expect.
  SavedSequence load(const Model& model, const Engine& engine) const;

 private:
  StateFile() = default;
  std::string path_;
  std::unique_ptr<MappedFile> file_;
  std::unique_ptr<SafetensorsHeader> header_;
  std::vector<int32_t> tokens_;
  std::string state_format_, model_fingerprint_, model_name_;
};

}  // namespace megaqwen

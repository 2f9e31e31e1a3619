// StateFileStore: a folder of state files (state_file.h) behind the server's prompt cache (`megaqwen
// serve --cache-dir DIR`). Sequences evicted from memory are written here instead of being dropped,
// and every sequence the cache holds when the server stops, so conversations outlive a restart and
// the cache can outgrow memory; a prompt that shares more with a stored sequence than with anything
// in memory gets it read back.
//
// Only files of the store's own model and engine layout are indexed, read and deleted; other files
// in the folder (another model's, anything else) are left alone. The folder is kept within a byte
// budget by deleting the least recently used files; a file whose sequence is a prefix of a newer
// one is deleted when that one is written (the newer one serves every prompt the older would).
// Not thread-safe: the server's one engine worker uses it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "megaqwen/engine/generator.h"

namespace megaqwen {

struct Model;

class StateFileStore {
 public:
  // Creates `dir` if needed and indexes the files in it of this model and `state_format` (the
  // engine's Engine::state_format()), most recently written first. Throws Error when the folder
  // cannot be made or read.
  StateFileStore(std::filesystem::path dir, uint64_t budget_bytes, std::shared_ptr<const Model> model,
                 std::string state_format);

  struct Match {
    size_t index = 0;   // for load()
    size_t shared = 0;  // leading tokens shared with the prompt (at most the limit)
  };
  // The stored sequence sharing the longest prefix with `prompt`, counting at most `limit` tokens.
  std::optional<Match> best(std::span<const int32_t> prompt, size_t limit) const;
  // Whether a stored sequence holds all of `tokens` (as its whole or its beginning).
  bool holds(std::span<const int32_t> tokens) const;
  // Reads stored sequence `index` for `engine` (which runs the store's model) and makes it the most
  // recently used. When that fails (a file gone or damaged, memory short) the entry leaves the index
  // (the file stays) and Error is thrown.
  SavedSequence load(size_t index, const Engine& engine);
  // Writes `sequence` (unless a stored one already holds it, or it alone exceeds the budget), deletes
  // the stored prefixes of it, then the least recently used files beyond the budget. Throws Error
  // when the file cannot be written (the store is unchanged then).
  void store(const SavedSequence& sequence, const Engine& engine);

  size_t entries() const { return entries_.size(); }
  uint64_t bytes() const { return bytes_; }
  size_t skipped_files() const { return skipped_; }  // files in the folder that are not this store's
  const std::filesystem::path& dir() const { return dir_; }

 private:
  struct Entry {
    std::filesystem::path path;
    std::vector<int32_t> tokens;
    uint64_t bytes = 0;
  };
  void erase(size_t index);  // deletes the file too

  std::filesystem::path dir_;
  uint64_t budget_;
  std::shared_ptr<const Model> model_;
  std::string state_format_, fingerprint_;
  std::vector<Entry> entries_;  // most recently used first
  uint64_t bytes_ = 0;
  size_t skipped_ = 0;
};

}  // namespace megaqwen

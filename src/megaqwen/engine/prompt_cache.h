// PromptCache: sequences the engine's cache held, set aside in host memory, so that several
// conversations can take turns on a one-sequence engine without prefilling their whole history at
// every turn (the server's --cache-ram / --cache-vram; llama.cpp's server keeps a prompt cache for the
// same reason). The copies live where the engine keeps them: host memory for the CPU engines, device
// memory for the CUDA engines (Engine::state_memory), each kind with its own budget.
//
// Before each request, prepare() compares the prompt with the sequence the engine holds (the
// resident one):
//  - a prompt that keeps all of the resident sequence's last prompt continues that conversation (the
//    reply it generated may be re-rendered differently, e.g. without its thinking): nothing is saved;
//  - a prompt that drops part of it is another conversation (or an edited one): the resident
//    sequence is copied out first (Engine::save_state), since the request is about to overwrite it.
// Then the saved sequence sharing the longest prefix with the prompt is put back
// (Engine::restore_state) when it shares more than the resident one by at least min_tokens, and
// Generator::run prefills only the rest. Entries are evicted least recently used first to stay within
// the byte budget and the entry count; an entry that is a prefix of a newer one is dropped (the newer one serves every
// prompt the older one would). With a folder behind it (`disk`, state_file_store.h: --cache-dir),
// evicted entries are written there instead of being dropped, a stored sequence that shares more with
// a prompt than anything in memory is read back, and persist() writes everything when the server stops.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <vector>

#include "megaqwen/engine/generator.h"
#include "megaqwen/engine/state_file_store.h"

namespace megaqwen {

struct PromptCacheOptions {
  // Memory for saved sequences where the engine keeps them (Engine::state_memory); 0 turns the
  // cache off for such engines.
  uint64_t host_budget_bytes = uint64_t(4) << 30;
  uint64_t device_budget_bytes = uint64_t(4) << 30;
  int min_tokens = 32;    // shorter sequences, or smaller gains, are not worth a copy
  int max_entries = 64;   // each request compares its prompt with every entry: keep that short
  // The folder behind the memory (for the engine's model and state format); nullptr: none.
  std::shared_ptr<StateFileStore> disk;
};

struct PromptCacheStats {
  StateMemory memory = StateMemory::Host;  // where the entries live (the engine's state_memory())
  uint64_t budget_bytes = 0;               // the budget of that memory
  size_t entries = 0;
  uint64_t bytes = 0;
  long long saves = 0, restores = 0, restored_tokens = 0, evictions = 0;
  long long skipped_for_memory = 0;  // saves left out: the machine had too little memory available
  long long errors = 0;              // saves or restores that failed (the request went on without them)
  // The folder (PromptCacheOptions::disk): sequences and bytes in it, files written, sequences read back.
  size_t disk_entries = 0;
  uint64_t disk_bytes = 0;
  long long disk_writes = 0, disk_restores = 0;
};

class PromptCache {
 public:
  // `memory`: where the engine it serves keeps its states (its state_memory()); it picks the budget.
  explicit PromptCache(PromptCacheOptions options = {}, StateMemory memory = StateMemory::Host);

  // Call before generator.run(request). Returns the prompt tokens a restored sequence provides (0
  // when none was restored). A save or restore that fails is counted in stats().errors and skipped:
  // the generator then holds its own sequence, or (a failed restore) nothing.
  int prepare(Generator& generator, const GenerationRequest& request);
  // After a failed request (the scheduler resets the generator): the resident sequence is gone.
  void forget_resident() { resident_prompt_tokens_ = 0; }
  // With a folder: writes the resident sequence and every entry in memory there (the server stops).
  // Failures are counted in stats().errors. Returns the sequences written.
  int persist(Generator& generator);

  PromptCacheStats stats() const;  // thread-safe (metrics scrapes)
  // The saved sequences' token counts, most recently used first (tests).
  std::vector<size_t> entry_sizes() const;

 private:
  struct Entry {
    SavedSequence sequence;
    uint64_t bytes = 0;
  };

  void save_resident(Generator& generator, uint64_t budget);
  // Takes mutex_; returns the entries evicted (for the folder).
  std::vector<Entry> insert(Entry entry, uint64_t budget);
  // Writes `sequence` to the folder; false (counted as an error) when that fails.
  bool write_to_disk(const SavedSequence& sequence, const Engine& engine);

  PromptCacheOptions options_;
  size_t resident_prompt_tokens_ = 0;  // length of the last prompt run on the engine's sequence
  mutable std::mutex mutex_;           // guards entries_ and stats_ against scrapes
  std::list<Entry> entries_;           // most recently used first
  PromptCacheStats stats_;
};

}  // namespace megaqwen

#include "megaqwen/engine/prompt_cache.h"

#include <algorithm>
#include <optional>
#include <span>

#include "megaqwen/util/error.h"

namespace megaqwen {

namespace {

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// Memory left to the rest of the machine (or, on a GPU, to the engine's own allocations) after a
// save; a save that would cut into it is skipped.
constexpr uint64_t kHostReserveBytes = uint64_t(1) << 30;
constexpr uint64_t kDeviceReserveBytes = uint64_t(512) << 20;

}  // namespace

PromptCache::PromptCache(PromptCacheOptions options, StateMemory memory) : options_(options) {
  stats_.memory = memory;
  if (options_.disk) {
    stats_.disk_entries = options_.disk->entries();
    stats_.disk_bytes = options_.disk->bytes();
  }
  stats_.budget_bytes = memory == StateMemory::Host ? options_.host_budget_bytes : options_.device_budget_bytes;
  if (options_.min_tokens < 1) fail("the prompt cache's min_tokens must be >= 1, got {}", options_.min_tokens);
  if (options_.max_entries < 1) fail("the prompt cache's max_entries must be >= 1, got {}", options_.max_entries);
}

int PromptCache::prepare(Generator& generator, const GenerationRequest& request) {
  const std::vector<int32_t>& prompt = request.prompt;
  const size_t min_tokens = size_t(options_.min_tokens);
  int restored = 0;
  if (generator.engine().state_memory() != stats_.memory)
    fail("this prompt cache was made for an engine keeping its states in {} memory, not {}",
         state_memory_name(stats_.memory), state_memory_name(generator.engine().state_memory()));
  const uint64_t budget = stats_.budget_bytes;  // constant: read without the lock
  if (budget > 0 || options_.disk) {
    // What Generator::run may reuse: never the prompt's last token; nothing when it scores the prompt.
    const size_t usable = request.prompt_logprobs || prompt.empty() ? 0 : prompt.size() - 1;
    const std::vector<int32_t>& resident = generator.cached_tokens();
    const size_t shared = common_prefix(resident, prompt);
    const size_t kept = std::min(shared, usable);
    const bool continues = !request.prompt_logprobs && shared >= std::min(resident_prompt_tokens_, resident.size());

    // The entry to restore, chosen first and made the most recently used, so that setting the
    // resident sequence aside cannot evict it; held by copy (its state is shared, not copied). One
    // from the folder is read before that save too (the save may write to the folder).
    std::optional<Entry> chosen;
    std::optional<StateFileStore::Match> from_disk;
    {
      std::lock_guard lock(mutex_);
      auto best = entries_.end();
      size_t best_shared = 0;
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        const size_t n = std::min(common_prefix(it->sequence.tokens, prompt), usable);
        if (n > best_shared) best = it, best_shared = n;
      }
      if (options_.disk)
        if (auto m = options_.disk->best(prompt, usable); m && m->shared > best_shared) from_disk = m;
      if (from_disk) {
        if (from_disk->shared < kept + min_tokens) from_disk.reset();
      } else if (best != entries_.end() && best_shared >= kept + min_tokens) {
        entries_.splice(entries_.begin(), entries_, best);
        chosen = entries_.front();
        restored = int(best_shared);
      }
    }
    if (from_disk) {
      try {
        chosen = Entry{options_.disk->load(from_disk->index, generator.engine()), 0};
        restored = int(from_disk->shared);
        std::lock_guard lock(mutex_);
        ++stats_.disk_restores;
      } catch (const std::exception&) {
        std::lock_guard lock(mutex_);
        ++stats_.errors;
      }
      std::lock_guard lock(mutex_);
      stats_.disk_entries = options_.disk->entries();
      stats_.disk_bytes = options_.disk->bytes();
    }
    // A copy that fails (memory ran out between the check and the allocation) costs the request
    // nothing but the reuse: a failed save changes nothing, a failed restore leaves the cache empty.
    if (!continues && resident.size() >= kept + min_tokens) {
      try {
        save_resident(generator, budget);
      } catch (const std::exception&) {
        std::lock_guard lock(mutex_);
        ++stats_.errors;
      }
    }
    if (chosen) {
      try {
        generator.restore(chosen->sequence);
        std::lock_guard lock(mutex_);
        ++stats_.restores;
        stats_.restored_tokens += restored;
      } catch (const std::exception&) {
        generator.reset();
        restored = 0;
        std::lock_guard lock(mutex_);
        ++stats_.errors;
      }
    }
  }
  resident_prompt_tokens_ = prompt.size();
  return restored;
}

void PromptCache::save_resident(Generator& generator, uint64_t budget) {
  const std::vector<int32_t>& resident = generator.cached_tokens();
  {
    std::lock_guard lock(mutex_);
    for (const Entry& e : entries_)  // already saved (restored and not extended since): nothing to add
      if (e.sequence.tokens.size() >= resident.size() &&
          std::equal(resident.begin(), resident.end(), e.sequence.tokens.begin()))
        return;
    if (options_.disk && options_.disk->holds(resident)) return;  // read from the folder, not extended since
  }
  const Engine& engine = generator.engine();
  const uint64_t estimate = uint64_t(resident.size()) * engine.kv_bytes_per_token() + engine.state_bytes_per_step();
  if (estimate > budget && !options_.disk) return;  // (with a folder, it goes there instead)
  const uint64_t reserve = engine.state_memory() == StateMemory::Host ? kHostReserveBytes : kDeviceReserveBytes;
  if (auto available = engine.state_memory_available(); available && *available < estimate + reserve) {
    std::lock_guard lock(mutex_);
    ++stats_.skipped_for_memory;
    return;
  }
  std::optional<SavedSequence> saved = generator.save();
  if (!saved) return;
  const uint64_t bytes = saved->state->bytes() + saved->tokens.size() * sizeof(int32_t);
  for (const Entry& evicted : insert(Entry{std::move(*saved), bytes}, budget))
    if (options_.disk) write_to_disk(evicted.sequence, engine);
}

bool PromptCache::write_to_disk(const SavedSequence& sequence, const Engine& engine) {
  bool written = true;
  try {
    options_.disk->store(sequence, engine);
  } catch (const std::exception&) {
    written = false;
  }
  std::lock_guard lock(mutex_);
  ++(written ? stats_.disk_writes : stats_.errors);
  stats_.disk_entries = options_.disk->entries();
  stats_.disk_bytes = options_.disk->bytes();
  return written;
}

int PromptCache::persist(Generator& generator) {
  if (!options_.disk) return 0;
  // Least recently used first and the resident sequence last: the store keeps the order of writing.
  std::vector<Entry> entries;
  {
    std::lock_guard lock(mutex_);
    entries.assign(entries_.rbegin(), entries_.rend());
  }
  int written = 0;
  for (const Entry& e : entries) written += write_to_disk(e.sequence, generator.engine());
  if (!generator.cached_tokens().empty()) {
    std::optional<SavedSequence> resident;
    try {
      resident = generator.save();
    } catch (const std::exception&) {
      std::lock_guard lock(mutex_);
      ++stats_.errors;
    }
    if (resident) written += write_to_disk(*resident, generator.engine());
  }
  return written;
}

std::vector<PromptCache::Entry> PromptCache::insert(Entry entry, uint64_t budget) {
  std::vector<Entry> evicted;
  std::lock_guard lock(mutex_);
  if (entry.bytes > budget) {
    evicted.push_back(std::move(entry));
    return evicted;
  }
  const std::vector<int32_t>& tokens = entry.sequence.tokens;
  entries_.remove_if([&](const Entry& e) {  // superseded: a prefix of the new sequence
    const bool prefix = e.sequence.tokens.size() <= tokens.size() &&
                        std::equal(e.sequence.tokens.begin(), e.sequence.tokens.end(), tokens.begin());
    if (prefix) stats_.bytes -= e.bytes;
    return prefix;
  });
  stats_.bytes += entry.bytes;
  entries_.push_front(std::move(entry));
  ++stats_.saves;
  while ((stats_.bytes > budget || entries_.size() > size_t(options_.max_entries)) && entries_.size() > 1) {
    stats_.bytes -= entries_.back().bytes;
    evicted.push_back(std::move(entries_.back()));
    entries_.pop_back();
    ++stats_.evictions;
  }
  stats_.entries = entries_.size();
  return evicted;
}

PromptCacheStats PromptCache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::vector<size_t> PromptCache::entry_sizes() const {
  std::lock_guard lock(mutex_);
  std::vector<size_t> out;
  for (const Entry& e : entries_) out.push_back(e.sequence.tokens.size());
  return out;
}

}  // namespace megaqwen

// Byte-level BPE: a piece starts as one symbol per byte and adjacent symbols are merged, lowest
// merge rank first (leftmost among equal ranks), until no pair of neighbours has a merge. This is
// the merge order of HF tokenizers' BPE model (dropout off, no unk token, byte_fallback off).
// Results for short pieces are cached: natural text repeats pieces a lot.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace megaqwen {

struct MergeRule {
  std::int32_t left;    // token ids of the two neighbours
  std::int32_t right;
  std::int32_t merged;  // token id of their concatenation
};

class BpeModel {
 public:
  // byte_ids[b]: the token of the single byte b, or -1 when the vocabulary lacks it (HF then drops
  // that byte). A rule's rank is its index in `merges`; a later duplicate pair overrides an earlier one.
  BpeModel(const std::array<std::int32_t, 256>& byte_ids, const std::vector<MergeRule>& merges);
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Appends the tokens of one pre-tokenized piece (raw bytes) to `out`.
  void encode(std::string_view piece, std::vector<std::int32_t>& out) const;

  // Pieces up to this many bytes whose result has at most kMaxCachedIds tokens are cached.
  static constexpr std::size_t kMaxCachedKey = 22;
  static constexpr std::size_t kMaxCachedIds = 8;

 private:
  struct Slot {
    std::uint64_t key;  // (left << 32) | right; kEmpty when unused
    std::uint32_t rank;
    std::int32_t merged;
  };
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};

  const Slot* find(std::int32_t left, std::int32_t right) const;
  void merge(std::string_view piece, std::vector<std::int32_t>& out) const;

  std::array<std::int32_t, 256> byte_ids_;
  std::vector<Slot> slots_;  // open addressing, power-of-two size, linear probing
  std::uint64_t mask_ = 0;

  // A direct-mapped cache of short pieces: one 64-byte line per entry (key and ids inline), so a
  // hit costs one hash and one cache line; a colliding piece simply replaces the old entry.
  // Striped locks keep it safe when several threads encode at once.
  struct alignas(64) CacheEntry {
    std::uint64_t hash = 0;
    std::uint8_t key_length = 0;
    std::uint8_t id_count = 0;  // 0 = empty
    char key[kMaxCachedKey];
    std::int32_t ids[kMaxCachedIds];
  };
  static_assert(sizeof(CacheEntry) == 64);
  static constexpr std::size_t kCacheEntries = std::size_t{1} << 16;
  static constexpr std::size_t kLockStripes = 64;
  mutable std::vector<CacheEntry> cache_;
  mutable std::array<std::mutex, kLockStripes> locks_;
};

}  // namespace megaqwen

#include "megaqwen/tokenizer/bpe.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace megaqwen {
namespace {

std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
  return (std::uint64_t{static_cast<std::uint32_t>(left)} << 32) | static_cast<std::uint32_t>(right);
}

std::uint64_t mix(std::uint64_t k) {
  k *= 0x9E3779B97F4A7C15ull;
  return k ^ (k >> 31);
}

// A fast hash for short byte strings: eight bytes at a time through a multiply-xorshift mix.
std::uint64_t hash_piece(std::string_view s) {
  std::uint64_t h = 0x243F6A8885A308D3ull ^ s.size();
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t word;
    std::memcpy(&word, s.data() + i, 8);
    h = mix(h ^ word);
  }
  std::uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  return mix(mix(h ^ tail));
}

}  // namespace

BpeModel::BpeModel(const std::array<std::int32_t, 256>& byte_ids, const std::vector<MergeRule>& merges)
    : byte_ids_(byte_ids), cache_(kCacheEntries) {
  const std::size_t capacity = std::bit_ceil(std::max<std::size_t>(16, merges.size() * 2));
  slots_.assign(capacity, Slot{kEmpty, 0, 0});
  mask_ = capacity - 1;
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const MergeRule& m = merges[rank];
    const std::uint64_t key = pair_key(m.left, m.right);
    std::uint64_t i = mix(key) & mask_;
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    slots_[i] = Slot{key, static_cast<std::uint32_t>(rank), m.merged};
  }
}

const BpeModel::Slot* BpeModel::find(std::int32_t left, std::int32_t right) const {
  const std::uint64_t key = pair_key(left, right);
  for (std::uint64_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.key == key) return &s;
    if (s.key == kEmpty) return nullptr;
  }
}

void BpeModel::merge(std::string_view piece, std::vector<std::int32_t>& out) const {
  struct Symbol {
    std::int32_t id;
    std::int32_t prev, next;  // neighbours in the live list, -1 at the ends
    bool alive;
  };
  struct Candidate {
    std::uint32_t rank;
    std::int32_t pos;  // index of the left symbol
    std::int32_t merged;
    // std::push_heap keeps the largest on top; "largest" here is the lowest rank, then leftmost.
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  heap.clear();

  for (unsigned char b : piece) {
    const std::int32_t id = byte_ids_[b];
    if (id < 0) continue;
    const auto n = static_cast<std::int32_t>(symbols.size());
    symbols.push_back(Symbol{id, n - 1, n + 1, true});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  auto consider = [&](std::int32_t pos) {
    const std::int32_t next = symbols[pos].next;
    if (next < 0) return;
    if (const Slot* s = find(symbols[pos].id, symbols[next].id)) {
      heap.push_back(Candidate{s->rank, pos, s->merged});
      std::push_heap(heap.begin(), heap.end());
    }
  };
  for (std::int32_t pos = 0; pos + 1 < static_cast<std::int32_t>(symbols.size()); ++pos) consider(pos);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    // Skip stale candidates: either side may have grown since this one was queued.
    const Slot* s = find(left.id, symbols[left.next].id);
    if (s == nullptr || s->merged != top.merged) continue;
    Symbol& right = symbols[left.next];
    right.alive = false;
    left.id = top.merged;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (std::int32_t pos = 0; pos >= 0; pos = symbols[pos].next) out.push_back(symbols[pos].id);
}

void BpeModel::encode(std::string_view piece, std::vector<std::int32_t>& out) const {
  if (piece.size() == 1) {
    const std::int32_t id = byte_ids_[static_cast<unsigned char>(piece[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  if (piece.size() > kMaxCachedKey) {
    merge(piece, out);
    return;
  }
  const std::uint64_t hash = hash_piece(piece);
  const std::size_t slot = hash & (kCacheEntries - 1);
  CacheEntry& entry = cache_[slot];
  std::mutex& lock = locks_[slot % kLockStripes];
  {
    std::lock_guard guard(lock);
    if (entry.id_count != 0 && entry.hash == hash && entry.key_length == piece.size() &&
        std::memcmp(entry.key, piece.data(), piece.size()) == 0) {
      out.insert(out.end(), entry.ids, entry.ids + entry.id_count);
      return;
    }
  }
  const std::size_t first = out.size();
  merge(piece, out);
  const std::size_t count = out.size() - first;
  if (count == 0 || count > kMaxCachedIds) return;
  std::lock_guard guard(lock);
  entry.hash = hash;
  entry.key_length = static_cast<std::uint8_t>(piece.size());
  entry.id_count = static_cast<std::uint8_t>(count);
  std::memcpy(entry.key, piece.data(), piece.size());
  std::copy(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(), entry.ids);
}

}  // namespace megaqwen

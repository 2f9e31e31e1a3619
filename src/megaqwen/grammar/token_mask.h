// Token masks: the two steps every grammar constraint takes before a draw, whatever its recognizer.
//
// accepted_tokens walks a TokenTrie from a recognizer state, one byte per edge, and marks every
// token whose bytes the recognizer takes whole: a byte that fails prunes every token below it, and
// tokens that share a prefix share the work of reading it. The recognizer is any type whose
// `step(in, byte, out)` leaves `out` empty when the byte does not fit (JsonRecognizer,
// XmlToolCallRecognizer).
//
// mask_logits then sends the logits of the tokens not marked to -infinity. advance_bytes moves a
// recognizer's state through a whole token (what a constraint does after each draw).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "megaqwen/grammar/token_trie.h"

namespace megaqwen {

// One bit per token id, 64 per word.
using TokenBits = std::vector<uint64_t>;

inline void set_token_bit(TokenBits& bits, int32_t id) {
  if (id < 0) return;
  if (size_t(id) / 64 >= bits.size()) bits.resize(size_t(id) / 64 + 1, 0);
  bits[size_t(id) / 64] |= uint64_t(1) << (id % 64);
}

inline bool token_bit(const TokenBits& bits, int32_t id) {
  return id >= 0 && size_t(id) / 64 < bits.size() && (bits[size_t(id) / 64] >> (id % 64) & 1);
}

// Marks in `bits` the tokens below trie node `node` whose bytes `recognizer` accepts from
// levels[level]; levels holds the state after each byte of the path so far (size: the trie's
// longest token + 1).
template <class Recognizer, class State>
void accepted_tokens(const TokenTrie& trie, const Recognizer& recognizer, std::vector<State>& levels,
                     TokenBits& bits, uint32_t node = 0, size_t level = 0) {
  const TokenTrie::Node& n = trie.nodes()[node];
  for (uint32_t e = n.first_edge; e < n.first_edge + n.edges; ++e) {
    recognizer.step(levels[level], trie.edge_byte(e), levels[level + 1]);
    if (levels[level + 1].empty()) continue;
    const uint32_t child = trie.edge_child(e);
    const TokenTrie::Node& c = trie.nodes()[child];
    for (uint32_t i = c.first_token; i < c.first_token + c.tokens; ++i) set_token_bit(bits, trie.token_id(i));
    accepted_tokens(trie, recognizer, levels, bits, child, level + 1);
  }
}

// Runs `bytes` through the recognizer from `state`: when every byte fits, the state moves and the
// result is true; otherwise the state is left as it was.
template <class Recognizer, class State>
bool advance_bytes(const Recognizer& recognizer, State& state, std::string_view bytes) {
  State next, cur = state;
  for (char c : bytes) {
    recognizer.step(cur, uint8_t(c), next);
    if (next.empty()) return false;
    cur.swap(next);
  }
  state.swap(cur);
  return true;
}

// Sets every logit whose token is not in `bits` (nor `extra`, when >= 0) to -infinity. Returns
// whether some allowed token keeps a finite logit (false: the model cannot go on).
bool mask_logits(const TokenBits& bits, int32_t extra, std::span<float> logits);

}  // namespace megaqwen

#include "megaqwen/grammar/json_constraint.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "megaqwen/util/error.h"

namespace megaqwen {

namespace {

constexpr size_t kMaxCachedMasks = 512;  // ~19 KB each for Qwen's vocabulary

}  // namespace

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const TokenTrie> trie,
                               std::vector<int32_t> end_ids, std::optional<ThinkTokens> think,
                               bool starts_in_thinking)
    : recognizer_(std::move(grammar)),
      trie_(std::move(trie)),
      end_ids_(std::move(end_ids)),
      think_(think),
      phase_(!think ? Phase::Json : starts_in_thinking ? Phase::Thinking : Phase::MayThink) {
  levels_.resize(trie_->max_token_bytes() + 1);
}

const std::vector<uint64_t>& JsonConstraint::allowed() {
  if (current_) return *current_;
  std::string key = recognizer_.cache_key(trie_->max_token_bytes());
  if (auto it = cache_.find(key); it != cache_.end()) return *(current_ = &it->second);
  if (cache_.size() >= kMaxCachedMasks) cache_.clear();
  std::vector<uint64_t> bits((size_t(trie_->vocab_size()) + 63) / 64 + 1, 0);
  if (recognizer_.complete() && suffix_.empty())
    for (int32_t id : end_ids_)
      if (id >= 0) {
        if (size_t(id) / 64 >= bits.size()) bits.resize(size_t(id) / 64 + 1, 0);
        bits[size_t(id) / 64] |= uint64_t(1) << (id % 64);
      }
  levels_[0] = recognizer_.state();
  walk(0, 0, bits);
  ++walks_;
  return *(current_ = &cache_.emplace(std::move(key), std::move(bits)).first->second);
}

// Tries every edge below `node`, whose prefix led to levels_[level]; sets the bits of the tokens
// that end where a prefix is still accepted.
void JsonConstraint::walk(uint32_t node, size_t level, std::vector<uint64_t>& bits) {
  const TokenTrie::Node& n = trie_->nodes()[node];
  for (uint32_t e = n.first_edge; e < n.first_edge + n.edges; ++e) {
    recognizer_.step(levels_[level], trie_->edge_byte(e), levels_[level + 1]);
    if (levels_[level + 1].empty()) continue;
    const uint32_t child = trie_->edge_child(e);
    const TokenTrie::Node& c = trie_->nodes()[child];
    for (uint32_t i = c.first_token; i < c.first_token + c.tokens; ++i) {
      const int32_t id = trie_->token_id(i);
      bits[size_t(id) / 64] |= uint64_t(1) << (id % 64);
    }
    walk(child, level + 1, bits);
  }
}

void JsonConstraint::mask(std::span<float> logits) {
  if (phase_ == Phase::Thinking) return;
  if (suffix_taken_ > 0) {  // in the suffix: its next token, or at its end an end token
    std::vector<int32_t> ids;
    if (suffix_taken_ < suffix_.size()) ids.push_back(suffix_[suffix_taken_]);
    else ids = end_ids_;
    bool any = false;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (std::find(ids.begin(), ids.end(), int32_t(i)) != ids.end()) any = any || logits[i] > -INFINITY;
      else logits[i] = -INFINITY;
    }
    if (!any) fail("the JSON constraint's closing tokens are out of the model's vocabulary");
    return;
  }
  const std::vector<uint64_t>& bits = allowed();
  // Besides what continues the JSON: <think> where the reply may open it, the suffix's first token
  // once the value is whole.
  int32_t open = phase_ == Phase::MayThink ? think_->open : -1;
  if (!suffix_.empty() && recognizer_.complete()) {
    if (open >= 0) fail("a JSON constraint with a suffix cannot let the reply think first");
    open = suffix_[0];
  }
  bool any = false;
  // A word at a time: most words of a mask are all ones or all zeros.
  for (size_t w = 0; w * 64 < logits.size(); ++w) {
    uint64_t word = w < bits.size() ? bits[w] : 0;
    if (open >= 0 && size_t(open) / 64 == w) word |= uint64_t(1) << (open % 64);
    float* x = logits.data() + w * 64;
    const size_t n = std::min<size_t>(64, logits.size() - w * 64);
    if (word == 0) {
      std::fill(x, x + n, -INFINITY);
      continue;
    }
    if (word == ~uint64_t(0) && any) continue;
    for (size_t i = 0; i < n; ++i) {
      if (word >> i & 1)
        any = any || x[i] > -INFINITY;
      else
        x[i] = -INFINITY;
    }
  }
  if (!any) fail("the JSON constraint leaves no token the model can produce next");
}

void JsonConstraint::accept(int32_t token) {
  if (phase_ == Phase::Thinking) {
    if (token == think_->close) phase_ = Phase::Json;
    return;
  }
  if (phase_ == Phase::MayThink) {
    phase_ = token == think_->open ? Phase::Thinking : Phase::Json;
    if (phase_ == Phase::Thinking) return;
  }
  if (!suffix_.empty() && recognizer_.complete() && suffix_taken_ < suffix_.size() &&
      token == suffix_[suffix_taken_]) {
    ++suffix_taken_;
    return;
  }
  if (std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end()) {
    if (suffix_taken_ < suffix_.size()) fail("token {} ends the reply before the constrained JSON's closing tokens", token);
    return;
  }
  if (suffix_taken_ > 0) fail("token {} does not continue the constrained JSON's closing tokens", token);
  const std::string_view bytes = trie_->bytes(token);
  if (bytes.empty() || !recognizer_.advance(bytes))
    fail("token {} does not continue the constrained JSON (it was not among the allowed tokens)", token);
  current_ = nullptr;
}

}  // namespace megaqwen

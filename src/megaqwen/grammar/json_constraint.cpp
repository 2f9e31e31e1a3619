#include "megaqwen/grammar/json_constraint.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "megaqwen/grammar/token_mask.h"
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
  TokenBits bits((size_t(trie_->vocab_size()) + 63) / 64 + 1, 0);
  if (recognizer_.complete() && suffix_.empty())
    for (int32_t id : end_ids_) set_token_bit(bits, id);
  levels_[0] = recognizer_.state();
  accepted_tokens(*trie_, recognizer_, levels_, bits);
  ++walks_;
  return *(current_ = &cache_.emplace(std::move(key), std::move(bits)).first->second);
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
  const bool any = mask_logits(bits, open, logits);
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

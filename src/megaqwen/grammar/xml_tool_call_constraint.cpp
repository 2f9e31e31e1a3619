#include "megaqwen/grammar/xml_tool_call_constraint.h"

#include <algorithm>

#include "megaqwen/util/error.h"

namespace megaqwen {

namespace {

constexpr size_t kMaxCachedMasks = 256;  // ~19 KB each for Qwen's vocabulary

}  // namespace

XmlToolCallConstraint::XmlToolCallConstraint(std::shared_ptr<const XmlToolCallGrammar> grammar,
                                             std::shared_ptr<const TokenTrie> trie, std::vector<int32_t> end_ids,
                                             std::vector<AddedToken> added)
    : recognizer_(std::move(grammar)), trie_(std::move(trie)), end_ids_(std::move(end_ids)), added_(std::move(added)) {
  levels_.resize(trie_->max_token_bytes() + 1);
}

const TokenBits& XmlToolCallConstraint::allowed() {
  if (current_) return *current_;
  std::string key = recognizer_.cache_key(trie_->max_token_bytes());
  if (auto it = cache_.find(key); it != cache_.end()) return *(current_ = &it->second);
  if (cache_.size() >= kMaxCachedMasks) cache_.clear();
  TokenBits bits((size_t(trie_->vocab_size()) + 63) / 64 + 1, 0);
  if (recognizer_.complete())
    for (int32_t id : end_ids_) set_token_bit(bits, id);
  levels_[0] = recognizer_.state();
  accepted_tokens(*trie_, recognizer_, levels_, bits);
  for (const AddedToken& t : added_) {
    XmlToolCallRecognizer r = recognizer_;
    if (r.advance(t.text)) set_token_bit(bits, t.id);
  }
  ++walks_;
  return *(current_ = &cache_.emplace(std::move(key), std::move(bits)).first->second);
}

void XmlToolCallConstraint::mask(std::span<float> logits) {
  if (!mask_logits(allowed(), -1, logits)) fail("the tool call's constraint leaves no token the model can produce next");
}

void XmlToolCallConstraint::accept(int32_t token) {
  if (std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end()) {
    if (!recognizer_.complete()) fail("token {} ends the reply inside the constrained tool call", token);
    return;
  }
  std::string_view bytes = trie_->bytes(token);
  for (const AddedToken& t : added_)
    if (t.id == token) bytes = t.text;
  if (bytes.empty() || !recognizer_.advance(bytes))
    fail("token {} does not continue the constrained tool call (it was not among the allowed tokens)", token);
  current_ = nullptr;
}

}  // namespace megaqwen

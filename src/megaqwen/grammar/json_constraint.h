// JsonConstraint: structured output. Before every draw it masks the logits to the tokens whose
// bytes JsonRecognizer accepts from its state (found by walking the vocabulary's TokenTrie), plus
// the end tokens once the value is whole; after the draw it takes the token.
//
// Masks are cached by recognizer state: inside a long string, or between the same keys of
// repeated objects, the state recurs and the walk is not repeated. With `start_after` (a model that
// thinks first: Qwen3's </think>) everything is allowed until that token has been drawn.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "megaqwen/grammar/json_recognizer.h"
#include "megaqwen/grammar/token_trie.h"
#include "megaqwen/sampling/output_constraint.h"

namespace megaqwen {

class JsonConstraint final : public OutputConstraint {
 public:
  JsonConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const TokenTrie> trie,
                 std::vector<int32_t> end_ids, std::optional<int32_t> start_after = std::nullopt);

  void mask(std::span<float> logits) override;
  void accept(int32_t token) override;

  bool active() const { return active_; }
  const JsonRecognizer& recognizer() const { return recognizer_; }
  // Whether token id may come next: a bit per id (64 per word), the end ids included.
  const std::vector<uint64_t>& allowed();
  static bool allows(const std::vector<uint64_t>& bits, int32_t id) {
    return id >= 0 && size_t(id) / 64 < bits.size() && (bits[size_t(id) / 64] >> (id % 64) & 1);
  }
  size_t masks_computed() const { return walks_; }

 private:
  void walk(uint32_t node, size_t level, std::vector<uint64_t>& bits);

  JsonRecognizer recognizer_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<int32_t> end_ids_;
  std::optional<int32_t> start_after_;
  bool active_;
  std::vector<JsonRecognizer::State> levels_;  // the walk's state after each byte of the prefix
  std::unordered_map<std::string, std::vector<uint64_t>> cache_;
  const std::vector<uint64_t>* current_ = nullptr;  // allowed() of the present state
  size_t walks_ = 0;
};

}  // namespace megaqwen

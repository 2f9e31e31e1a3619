// JsonConstraint: structured output. Before every draw it masks the logits to the tokens whose
// bytes JsonRecognizer accepts from its state (found by walking the vocabulary's TokenTrie), plus
// the end tokens once the value is whole; after the draw it takes the token.
//
// Masks are cached by recognizer state: inside a long string, or between the same keys of
// repeated objects, the state recurs and the walk is not repeated.
//
// A model that thinks first (Qwen3, Qwen3.5) writes the JSON after its thinking: given its think
// tokens, the constraint lets the reply open a <think> block where the JSON would start (or starts
// inside one, when the prompt opened it), leaves the thinking free, and constrains what follows
// </think>.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "megaqwen/grammar/json_recognizer.h"
#include "megaqwen/grammar/token_mask.h"
#include "megaqwen/grammar/token_trie.h"
#include "megaqwen/sampling/output_constraint.h"

namespace megaqwen {

class JsonConstraint final : public OutputConstraint {
 public:
  struct ThinkTokens {
    int32_t open = -1, close = -1;  // <think>, </think>
  };
  JsonConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const TokenTrie> trie,
                 std::vector<int32_t> end_ids, std::optional<ThinkTokens> think = std::nullopt,
                 bool starts_in_thinking = false);
  // Tokens that must follow the whole value, in order, before an end token (a tool call's closing
  // "\n</tool_call>"). While they remain, the end tokens are refused.
  void set_suffix(std::vector<int32_t> tokens) { suffix_ = std::move(tokens); }

  void mask(std::span<float> logits) override;
  void accept(int32_t token) override;

  // Inside the thinking: nothing is masked.
  bool thinking() const { return phase_ == Phase::Thinking; }
  const JsonRecognizer& recognizer() const { return recognizer_; }
  // Whether token id may come next: a bit per id (64 per word), the end ids included.
  const std::vector<uint64_t>& allowed();
  static bool allows(const std::vector<uint64_t>& bits, int32_t id) { return token_bit(bits, id); }
  size_t masks_computed() const { return walks_; }

 private:
  JsonRecognizer recognizer_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<int32_t> end_ids_;
  std::optional<ThinkTokens> think_;
  std::vector<int32_t> suffix_;
  size_t suffix_taken_ = 0;
  enum class Phase { MayThink, Thinking, Json } phase_;
  std::vector<JsonRecognizer::State> levels_;  // the walk's state after each byte of the prefix
  std::unordered_map<std::string, std::vector<uint64_t>> cache_;
  const std::vector<uint64_t>* current_ = nullptr;  // allowed() of the present state
  size_t walks_ = 0;
};

}  // namespace megaqwen

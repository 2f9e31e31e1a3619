// XmlToolCallConstraint: a forced Qwen3.5 tool call (XmlToolCallGrammar) as an OutputConstraint.
// Before every draw the logits are masked to the tokens whose bytes XmlToolCallRecognizer accepts
// (a walk of the vocabulary's TokenTrie, cached by recognizer state; added tokens such as
// "</tool_call>" tried by their text), and to the end tokens once the call is whole; after the draw the token moves the recognizer. A forced call skips the thinking,
// so nothing here is left free.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "megaqwen/grammar/token_mask.h"
#include "megaqwen/grammar/xml_tool_call_recognizer.h"
#include "megaqwen/sampling/output_constraint.h"

namespace megaqwen {

class XmlToolCallConstraint final : public OutputConstraint {
 public:
  // An added token the grammar's text may use, though the trie leaves it out: Qwen's
  // "</tool_call>" is one token of its own.
  struct AddedToken {
    int32_t id = -1;
    std::string text;
  };
  XmlToolCallConstraint(std::shared_ptr<const XmlToolCallGrammar> grammar, std::shared_ptr<const TokenTrie> trie,
                        std::vector<int32_t> end_ids, std::vector<AddedToken> added = {});

  void mask(std::span<float> logits) override;
  void accept(int32_t token) override;

  const XmlToolCallRecognizer& recognizer() const { return recognizer_; }
  // The tokens that may come next, the end ids included.
  const TokenBits& allowed();
  size_t masks_computed() const { return walks_; }

 private:
  XmlToolCallRecognizer recognizer_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<int32_t> end_ids_;
  std::vector<AddedToken> added_;
  std::vector<XmlToolCallRecognizer::State> levels_;  // the walk's state after each byte of the path
  std::unordered_map<std::string, TokenBits> cache_;
  const TokenBits* current_ = nullptr;  // allowed() of the present state
  size_t walks_ = 0;
};

}  // namespace megaqwen

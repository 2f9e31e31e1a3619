// TokenTrie: a vocabulary's token bytes as a trie, so a constraint can try every token against a
// recognizer state by walking it: a prefix that fails prunes every token below it, and tokens that
// share a prefix share the work of reading it. Built once per tokenizer and shared.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace megaqwen {

class Tokenizer;

class TokenTrie {
 public:
  // token_bytes[id]: the bytes of token id; an empty string leaves id out.
  explicit TokenTrie(const std::vector<std::string>& token_bytes);
  // The tokenizer's ordinary tokens: added tokens (<|im_end|>, <think>, ...) are left out.
  static std::shared_ptr<const TokenTrie> of(const Tokenizer& tokenizer);

  struct Node {
    uint32_t first_edge = 0, edges = 0;    // edge_byte / edge_child [first_edge, +edges), by byte
    uint32_t first_token = 0, tokens = 0;  // token_ids [first_token, +tokens): tokens ending here
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  uint8_t edge_byte(uint32_t e) const { return edge_byte_[e]; }
  uint32_t edge_child(uint32_t e) const { return edge_child_[e]; }
  int32_t token_id(uint32_t i) const { return token_ids_[i]; }
  int32_t vocab_size() const { return int32_t(offsets_.size()) - 1; }
  size_t max_token_bytes() const { return max_bytes_; }
  // The bytes of id ("" for an id left out).
  std::string_view bytes(int32_t id) const;

 private:
  uint32_t build(const std::vector<int32_t>& sorted, size_t lo, size_t hi, size_t depth);

  std::string all_bytes_;
  std::vector<uint32_t> offsets_;
  std::vector<Node> nodes_;  // nodes_[0] is the root
  std::vector<uint8_t> edge_byte_;
  std::vector<uint32_t> edge_child_;
  std::vector<int32_t> token_ids_;
  size_t max_bytes_ = 0;
};

}  // namespace megaqwen

#include "megaqwen/grammar/token_trie.h"

#include <algorithm>
#include <numeric>

#include "megaqwen/tokenizer/tokenizer.h"

namespace megaqwen {

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes) {
  offsets_.reserve(token_bytes.size() + 1);
  for (const std::string& b : token_bytes) {
    offsets_.push_back(uint32_t(all_bytes_.size()));
    all_bytes_ += b;
    max_bytes_ = std::max(max_bytes_, b.size());
  }
  offsets_.push_back(uint32_t(all_bytes_.size()));
  std::vector<int32_t> ids;
  for (size_t i = 0; i < token_bytes.size(); ++i)
    if (!token_bytes[i].empty()) ids.push_back(int32_t(i));
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return bytes(a) < bytes(b) || (bytes(a) == bytes(b) && a < b); });
  build(ids, 0, ids.size(), 0);
}

std::shared_ptr<const TokenTrie> TokenTrie::of(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(size_t(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id)
    if (!tokenizer.is_added(id)) bytes[size_t(id)] = std::string(tokenizer.sampled_bytes(id));
  return std::make_shared<const TokenTrie>(bytes);
}

std::string_view TokenTrie::bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return std::string_view(all_bytes_).substr(offsets_[size_t(id)], offsets_[size_t(id) + 1] - offsets_[size_t(id)]);
}

// The node of sorted[lo, hi): tokens sharing their first `depth` bytes. Children are built first
// and their edges written after, so every node's edges are contiguous.
uint32_t TokenTrie::build(const std::vector<int32_t>& sorted, size_t lo, size_t hi, size_t depth) {
  const uint32_t index = uint32_t(nodes_.size());
  nodes_.emplace_back();
  Node node;
  node.first_token = uint32_t(token_ids_.size());
  while (lo < hi && bytes(sorted[lo]).size() == depth) token_ids_.push_back(sorted[lo++]);
  node.tokens = uint32_t(token_ids_.size()) - node.first_token;
  std::vector<std::pair<uint8_t, uint32_t>> edges;
  while (lo < hi) {
    const char c = bytes(sorted[lo])[depth];
    size_t end = lo;
    while (end < hi && bytes(sorted[end])[depth] == c) ++end;
    edges.emplace_back(uint8_t(c), build(sorted, lo, end, depth + 1));
    lo = end;
  }
  node.first_edge = uint32_t(edge_byte_.size());
  node.edges = uint32_t(edges.size());
  for (const auto& [byte, child] : edges) {
    edge_byte_.push_back(byte);
    edge_child_.push_back(child);
  }
  nodes_[index] = node;
  return index;
}

}  // namespace megaqwen

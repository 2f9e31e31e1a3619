#include "megaqwen/model/model_fingerprint.h"

#include <fmt/format.h>

#include <cstring>
#include <span>

#include "megaqwen/model/model.h"
#include "megaqwen/model/rope.h"

namespace megaqwen {

namespace {

constexpr uint64_t kWindowBytes = 4096;
constexpr uint64_t kWindows = 16;

// 64-bit multiply-xorshift over 8-byte words (not cryptographic: it tells models apart, it does not
// resist someone forging a match).
class Digest {
 public:
  void add(std::span<const uint8_t> bytes) {
    size_t i = 0;
    for (; i + 8 <= bytes.size(); i += 8) {
      uint64_t word;
      std::memcpy(&word, bytes.data() + i, 8);
      mix(word);
    }
    uint64_t tail = 0;
    if (i < bytes.size()) std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
    mix(tail ^ (uint64_t(bytes.size()) << 56));
  }
  void add(const std::string& text) { add({reinterpret_cast<const uint8_t*>(text.data()), text.size()}); }
  uint64_t value() const { return h_; }

 private:
  void mix(uint64_t word) {
    h_ = (h_ ^ word) * 0x9e3779b97f4a7c15ULL;
    h_ ^= h_ >> 29;
    h_ *= 0xbf58476d1ce4e5b9ULL;
    h_ ^= h_ >> 32;
  }
  uint64_t h_ = 0x6d65676171776e31ULL;
};

std::string config_text(const ModelConfig& c) {
  std::string types;
  for (LayerType t : c.layer_types) types += std::string(layer_type_name(t)) + ",";
  return fmt::format(
      "{} H{} L{} heads{} kv{} D{} I{} V{} theta{} eps{} tie{} rot{} rope{}:{}:{}:{}:{}:{}:{} types{} partial{} gate{} "
      "lin{}:{}:{}:{}:{}",
      c.model_type, c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size,
      c.vocab_size, c.rope_theta, c.rms_norm_eps, c.tie_word_embeddings, c.rotary_dim, int(c.rope_scaling.type),
      c.rope_scaling.factor, c.rope_scaling.original_max_position_embeddings, c.rope_scaling.beta_fast,
      c.rope_scaling.beta_slow, c.rope_scaling.attention_factor, c.rope_scaling.truncate, types,
      c.partial_rotary_factor, c.attn_output_gate, c.linear_num_key_heads, c.linear_num_value_heads,
      c.linear_key_head_dim, c.linear_value_head_dim, c.linear_conv_kernel);
}

}  // namespace

std::string model_fingerprint(const Model& model) {
  Digest d;
  d.add(config_text(model.config));
  const std::vector<float> inv_freq = rope_inverse_frequencies(model.config);
  d.add({reinterpret_cast<const uint8_t*>(inv_freq.data()), inv_freq.size() * sizeof(float)});
  d.add(fmt::format("amplitude{}", model.config.rope_scaling.amplitude()));
  for (const auto& [name, tensor] : model.checkpoint->tensors()) {
    d.add(fmt::format("{} {} {}", name, dtype_name(tensor.dtype()), tensor.info->shape_string()));
    const uint64_t size = tensor.byte_size();
    if (size <= kWindows * kWindowBytes) {
      d.add({tensor.data, size});
      continue;
    }
    for (uint64_t w = 0; w < kWindows; ++w) {
      const uint64_t at = (size - kWindowBytes) * w / (kWindows - 1);
      d.add({tensor.data + at, kWindowBytes});
    }
  }
  return fmt::format("{:016x}", d.value());
}

}  // namespace megaqwen

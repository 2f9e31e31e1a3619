// ModelConfig: the validated shape of a model, read from a Hugging Face config.json.
// Every field the engines rely on is checked at load time, so later code can trust it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace megaqwen {

enum class Architecture {
  Qwen3,    // model_type qwen3: dense, every layer full attention
  Qwen3_5,  // model_type qwen3_5 (multimodal wrapper, text under text_config) or qwen3_5_text: hybrid
};

// The token mixer of one layer of a hybrid model (config.json `layer_types`).
enum class LayerType {
  FullAttention,    // "full_attention": gated softmax attention with a KV cache
  LinearAttention,  // "linear_attention": Gated DeltaNet with a conv state and a recurrent state
};
const char* layer_type_name(LayerType type);  // as written in config.json

// How RoPE stretches to contexts longer than pretraining (config.json `rope_scaling`, or
// `rope_parameters.rope_type` in transformers >= 5), as transformers computes it: the inverse
// frequencies change (model/rope.h) and, for YaRN, cos and sin are scaled by attention_factor (only
// the rotated dims of q and k grow: with partial rotary, as in Qwen3.5, the rest do not).
struct RopeScaling {
  enum class Type { None, Linear, Yarn } type = Type::None;
  double factor = 1.0;                    // Linear, Yarn: how much longer the context gets
  int original_max_position_embeddings = 0;  // Yarn: the pretraining context
  double beta_fast = 32, beta_slow = 1;   // Yarn: the ramp between extrapolated and interpolated dims
  double attention_factor = 1.0;          // Yarn: multiplies cos and sin (so q.k by its square)
  bool truncate = true;                   // Yarn: the ramp's ends rounded to whole dims

  // What RoPE's cos and sin are multiplied by (so the rotated dims of q and k): YaRN's
  // attention_factor, else 1.
  float amplitude() const { return type == Type::Yarn ? float(attention_factor) : 1.0f; }
};

struct ModelConfig {
  Architecture architecture = Architecture::Qwen3;
  std::string model_type;        // as written in config.json: "qwen3", "qwen3_5" or "qwen3_5_text"
  int hidden_size = 0;           // H
  int num_layers = 0;            // L
  int num_heads = 0;             // query heads
  int num_kv_heads = 0;          // key/value heads (GQA: num_heads is a multiple)
  int head_dim = 0;              // D, explicit in Qwen3 (not H / num_heads)
  int intermediate_size = 0;     // I, the MLP width
  int vocab_size = 0;            // V, rows of the embedding and LM head
  int max_position_embeddings = 0;
  double rope_theta = 0;
  double rms_norm_eps = 0;
  bool tie_word_embeddings = false;
  std::string torch_dtype;       // informational; each tensor's dtype comes from its header
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
  int rotary_dim = 0;            // leading dims of each head RoPE rotates: head_dim, or less (partial rotary)
  RopeScaling rope_scaling;

  // Qwen3.5 hybrid only (Architecture::Qwen3_5); Qwen3 leaves them empty / zero.
  std::vector<LayerType> layer_types;  // [L]: each layer's token mixer
  double partial_rotary_factor = 1.0;  // rotary_dim = int(head_dim * factor)
  bool attn_output_gate = false;       // full attention: q_proj also yields a sigmoid gate per head
  std::vector<int> mrope_section;      // multimodal RoPE split (T, H, W); text positions make it plain RoPE
  bool mrope_interleaved = false;
  int linear_num_key_heads = 0;        // Gated DeltaNet: query/key heads
  int linear_num_value_heads = 0;      // value heads (a multiple of the key heads)
  int linear_key_head_dim = 0;
  int linear_value_head_dim = 0;
  int linear_conv_kernel = 0;          // causal depthwise conv width over q|k|v channels
  int mtp_num_hidden_layers = 0;       // multi-token-prediction layers stored as mtp.* (not run)

  bool is_hybrid() const { return architecture == Architecture::Qwen3_5; }
  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  int linear_key_dim() const { return linear_num_key_heads * linear_key_head_dim; }
  int linear_value_dim() const { return linear_num_value_heads * linear_value_head_dim; }
  int linear_conv_dim() const { return 2 * linear_key_dim() + linear_value_dim(); }  // q | k | v channels
  int count_layers(LayerType type) const;
  // The longest context the model's positions are meant for: max_position_embeddings, or what RoPE
  // scaling stretches it to (YaRN: original_max_position_embeddings x factor; linear: x factor).
  int context_limit() const;
  // Fails naming the limit when `context` is beyond it.
  void check_context(int context) const;

  int64_t parameter_count() const;  // embedding, layers, final norm and an untied head (no vision, no MTP)
};

// Parses config.json text; `source` names the file in error messages.
ModelConfig parse_model_config(std::string_view json_text, const std::string& source);
// Reads <dir>/config.json.
ModelConfig load_model_config(const std::filesystem::path& model_dir);

// Replaces the config's RoPE scaling with `json_text` (an object in rope_scaling's form, e.g.
// {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}; "{}" or
// {"rope_type": "default"} for none), checked as config.json's would be; `source` names it in errors.
void override_rope_scaling(ModelConfig& config, std::string_view json_text, const std::string& source);

}  // namespace megaqwen

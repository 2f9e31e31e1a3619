// ModelConfig: the validated shape of a model, read from a Hugging Face config.json.
// Every field the engines rely on is checked at load time, so later code can trust it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace megaqwen {

enum class Architecture { Qwen3 };

struct ModelConfig {
  Architecture architecture = Architecture::Qwen3;
  std::string model_type;        // as written in config.json, e.g. "qwen3"
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

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  int64_t parameter_count() const;  // embedding, layers, final norm and an untied head
};

// Parses config.json text; `source` names the file in error messages.
ModelConfig parse_model_config(std::string_view json_text, const std::string& source);
// Reads <dir>/config.json.
ModelConfig load_model_config(const std::filesystem::path& model_dir);

}  // namespace megaqwen

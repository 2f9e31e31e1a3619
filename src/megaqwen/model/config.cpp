#include "megaqwen/model/config.h"

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "megaqwen/util/error.h"
#include "megaqwen/util/json_excerpt.h"

namespace megaqwen {

namespace {

using nlohmann::json;

// Field readers that name the file and field in every error.
struct FieldReader {
  const json& object;
  const std::string& source;

  const json* find(const char* key) const {
    auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  const json& require(const char* key) const {
    const json* v = find(key);
    if (!v) fail("{}: missing required field '{}'", source, key);
    return *v;
  }
  int integer(const char* key, int64_t lo, int64_t hi) const { return checked_int(key, require(key), lo, hi); }
  int integer_or(const char* key, int fallback, int64_t lo, int64_t hi) const {
    const json* v = find(key);
    return v ? checked_int(key, *v, lo, hi) : fallback;
  }
  int checked_int(const char* key, const json& v, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer()) fail("{}: field '{}' must be an integer, got {}", source, key, json_excerpt(v));
    int64_t x = v.get<int64_t>();
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) x = hi + 1;
    if (x < lo || x > hi) fail("{}: field '{}' = {} is out of range [{}, {}]", source, key, json_excerpt(v), lo, hi);
    return int(x);
  }
  double number(const char* key, double lo, double hi) const {
    const json& v = require(key);
    if (!v.is_number()) fail("{}: field '{}' must be a number, got {}", source, key, json_excerpt(v));
    double x = v.get<double>();
    if (!(x >= lo && x <= hi)) fail("{}: field '{}' = {} is out of range [{}, {}]", source, key, json_excerpt(v), lo, hi);
    return x;
  }
  bool boolean_or(const char* key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail("{}: field '{}' must be true or false, got {}", source, key, json_excerpt(*v));
    return v->get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) fail("{}: field '{}' must be a string, got {}", source, key, json_excerpt(*v));
    return v->get<std::string>();
  }
};

}  // namespace

int64_t ModelConfig::parameter_count() const {
  int64_t H = hidden_size, D = head_dim;
  int64_t per_layer = 2 * H                                   // input and post-attention norms
                      + H * q_dim() + 2 * H * kv_dim()        // q, k, v
                      + int64_t(q_dim()) * H                  // o
                      + 2 * D                                 // q_norm, k_norm
                      + 3 * H * int64_t(intermediate_size);   // gate, up, down
  int64_t embed = int64_t(vocab_size) * H;
  return embed + num_layers * per_layer + H + (tie_word_embeddings ? 0 : embed);
}

ModelConfig parse_model_config(std::string_view json_text, const std::string& source) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) fail("{}: not valid JSON", source);
  if (!root.is_object()) fail("{}: expected a JSON object at the top level", source);
  FieldReader f{root, source};

  ModelConfig c;
  c.model_type = f.string_or("model_type", "");
  if (c.model_type.empty()) fail("{}: missing required field 'model_type'", source);
  if (c.model_type != "qwen3") {
    std::string arch;
    if (const json* a = f.find("architectures"); a && a->is_array() && !a->empty() && (*a)[0].is_string())
      arch = " (" + (*a)[0].get<std::string>() + ")";
    fail("{}: unsupported architecture '{}'{}; supported: qwen3", source, c.model_type, arch);
  }
  c.architecture = Architecture::Qwen3;

  constexpr int64_t kMaxDim = 1 << 16;
  c.hidden_size = f.integer("hidden_size", 1, kMaxDim);
  c.num_layers = f.integer("num_hidden_layers", 1, 1024);
  c.num_heads = f.integer("num_attention_heads", 1, 1024);
  c.num_kv_heads = f.integer_or("num_key_value_heads", c.num_heads, 1, 1024);
  c.head_dim = f.integer_or("head_dim", 0, 2, 1024);
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_heads != 0)
      fail("{}: no 'head_dim' and hidden_size {} is not a multiple of num_attention_heads {}", source,
           c.hidden_size, c.num_heads);
    c.head_dim = c.hidden_size / c.num_heads;
  }
  c.intermediate_size = f.integer("intermediate_size", 1, 1 << 20);
  c.vocab_size = f.integer("vocab_size", 1, 1 << 24);
  c.max_position_embeddings = f.integer("max_position_embeddings", 1, 1 << 24);
  // transformers >= 5 writes RoPE settings under rope_parameters; published Qwen3 configs have a
  // top-level rope_theta (and rope_scaling). Accept both, refuse anything but plain RoPE.
  if (const json* rp = f.find("rope_parameters")) {
    if (!rp->is_object()) fail("{}: field 'rope_parameters' must be an object", source);
    FieldReader rope{*rp, source};
    if (std::string type = rope.string_or("rope_type", "default"); type != "default")
      fail("{}: rope_parameters.rope_type '{}' is not supported (only plain RoPE)", source, type);
    c.rope_theta = f.find("rope_theta") ? f.number("rope_theta", 1.0, 1e12) : rope.number("rope_theta", 1.0, 1e12);
  } else {
    c.rope_theta = f.number("rope_theta", 1.0, 1e12);
  }
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-12, 1.0);
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", false);
  c.torch_dtype = f.string_or("torch_dtype", f.string_or("dtype", ""));

  if (c.num_heads % c.num_kv_heads != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", source, c.num_heads,
         c.num_kv_heads);
  if (c.head_dim % 2 != 0) fail("{}: head_dim {} must be even for rotary embeddings", source, c.head_dim);

  // Features the engines do not implement: refuse them rather than compute something else.
  if (std::string act = f.string_or("hidden_act", "silu"); act != "silu")
    fail("{}: unsupported hidden_act '{}' (only silu)", source, act);
  if (f.boolean_or("attention_bias", false)) fail("{}: attention_bias = true is not supported", source);
  if (f.boolean_or("use_sliding_window", false)) fail("{}: use_sliding_window = true is not supported", source);
  if (const json* rs = f.find("rope_scaling"); rs && !(rs->is_object() && rs->empty()))
    fail("{}: rope_scaling {} is not supported (only plain RoPE)", source, json_excerpt(*rs));

  c.bos_token_id = f.integer_or("bos_token_id", -1, -1, c.vocab_size - 1);
  if (const json* eos = f.find("eos_token_id")) {
    auto add = [&](const json& v) { c.eos_token_ids.push_back(f.checked_int("eos_token_id", v, 0, c.vocab_size - 1)); };
    if (eos->is_array()) {
      for (const json& v : *eos) add(v);
    } else {
      add(*eos);
    }
  }
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& model_dir) {
  std::filesystem::path path = model_dir / "config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read config.json (is this a model folder?)", path.string());
  std::stringstream text;
  text << in.rdbuf();
  return parse_model_config(text.str(), path.string());
}

}  // namespace megaqwen

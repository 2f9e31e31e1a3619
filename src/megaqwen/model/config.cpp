#include "megaqwen/model/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "megaqwen/util/error.h"
#include "megaqwen/util/json_excerpt.h"

namespace megaqwen {

namespace {

using nlohmann::json;

// Field readers that name the file and field in every error. `prefix` names the object the fields
// live in ("text_config." for Qwen3.5's language model), empty at the top level.
struct FieldReader {
  const json& object;
  const std::string& source;
  std::string prefix = {};

  std::string name(const char* key) const { return prefix + key; }
  const json* find(const char* key) const {
    auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  const json& require(const char* key) const {
    const json* v = find(key);
    if (!v) fail("{}: missing required field '{}'", source, name(key));
    return *v;
  }
  int integer(const char* key, int64_t lo, int64_t hi) const { return checked_int(key, require(key), lo, hi); }
  int integer_or(const char* key, int fallback, int64_t lo, int64_t hi) const {
    const json* v = find(key);
    return v ? checked_int(key, *v, lo, hi) : fallback;
  }
  int checked_int(const char* key, const json& v, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer()) fail("{}: field '{}' must be an integer, got {}", source, name(key), json_excerpt(v));
    int64_t x = v.get<int64_t>();
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) x = hi + 1;
    if (x < lo || x > hi) fail("{}: field '{}' = {} is out of range [{}, {}]", source, name(key), json_excerpt(v), lo, hi);
    return int(x);
  }
  double number(const char* key, double lo, double hi) const {
    const json& v = require(key);
    if (!v.is_number()) fail("{}: field '{}' must be a number, got {}", source, name(key), json_excerpt(v));
    double x = v.get<double>();
    if (!(x >= lo && x <= hi)) fail("{}: field '{}' = {} is out of range [{}, {}]", source, name(key), json_excerpt(v), lo, hi);
    return x;
  }
  double number_or(const char* key, double fallback, double lo, double hi) const {
    return find(key) ? number(key, lo, hi) : fallback;
  }
  bool boolean_or(const char* key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail("{}: field '{}' must be true or false, got {}", source, name(key), json_excerpt(*v));
    return v->get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) fail("{}: field '{}' must be a string, got {}", source, name(key), json_excerpt(*v));
    return v->get<std::string>();
  }
  const json* object_or_null(const char* key) const {
    const json* v = find(key);
    if (v && !v->is_object()) fail("{}: field '{}' must be an object, got {}", source, name(key), json_excerpt(*v));
    return v;
  }
};

constexpr int64_t kMaxDim = 1 << 16;

// Shape, norm, activation and token fields that Qwen3 and Qwen3.5's language model share. `f` reads
// the top level (Qwen3, qwen3_5_text) or text_config (the qwen3_5 wrapper); `default_head_dim` is
// transformers' default when head_dim is absent (0: hidden_size / num_attention_heads).
void read_common_fields(const FieldReader& f, int default_head_dim, ModelConfig& c) {
  const std::string& source = f.source;
  c.hidden_size = f.integer("hidden_size", 1, kMaxDim);
  c.num_layers = f.integer("num_hidden_layers", 1, 1024);
  c.num_heads = f.integer("num_attention_heads", 1, 1024);
  c.num_kv_heads = f.integer_or("num_key_value_heads", c.num_heads, 1, 1024);
  c.head_dim = f.integer_or("head_dim", default_head_dim, 2, 1024);
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_heads != 0)
      fail("{}: no '{}' and hidden_size {} is not a multiple of num_attention_heads {}", source, f.name("head_dim"),
           c.hidden_size, c.num_heads);
    c.head_dim = c.hidden_size / c.num_heads;
  }
  c.intermediate_size = f.integer("intermediate_size", 1, 1 << 20);
  c.vocab_size = f.integer("vocab_size", 1, 1 << 24);
  c.max_position_embeddings = f.integer("max_position_embeddings", 1, 1 << 24);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-12, 1.0);
  c.torch_dtype = f.string_or("torch_dtype", f.string_or("dtype", ""));

  if (c.num_heads % c.num_kv_heads != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", source, c.num_heads,
         c.num_kv_heads);
  if (c.head_dim % 2 != 0) fail("{}: head_dim {} must be even for rotary embeddings", source, c.head_dim);

  // Features the engines do not implement: refuse them rather than compute something else.
  if (std::string act = f.string_or("hidden_act", "silu"); act != "silu")
    fail("{}: unsupported hidden_act '{}' (only silu)", source, act);
  if (f.boolean_or("attention_bias", false)) fail("{}: {} = true is not supported", source, f.name("attention_bias"));
  if (f.boolean_or("use_sliding_window", false))
    fail("{}: {} = true is not supported", source, f.name("use_sliding_window"));

  c.bos_token_id = f.integer_or("bos_token_id", -1, -1, c.vocab_size - 1);
  if (const json* eos = f.find("eos_token_id")) {
    auto add = [&](const json& v) { c.eos_token_ids.push_back(f.checked_int("eos_token_id", v, 0, c.vocab_size - 1)); };
    if (eos->is_array()) {
      for (const json& v : *eos) add(v);
    } else {
      add(*eos);
    }
  }
}

// RoPE scaling from `rope` (rope_parameters, or the legacy rope_scaling object): its rope_type (or
// the older "type") and that type's fields, with transformers' defaults. Types whose frequencies
// change with the sequence (dynamic, longrope) cannot be cached in a KV cache and are refused.
void read_rope_scaling(const FieldReader& rope, ModelConfig& c) {
  const char* type_key = rope.find("rope_type") || !rope.find("type") ? "rope_type" : "type";
  const std::string type = rope.string_or(type_key, "default");
  RopeScaling& r = c.rope_scaling;
  if (type == "default") return;
  if (type != "linear" && type != "yarn")
    fail("{}: {} '{}' is not supported (default, linear and yarn are)", rope.source, rope.name(type_key), type);
  r.type = type == "linear" ? RopeScaling::Type::Linear : RopeScaling::Type::Yarn;
  r.factor = rope.number("factor", 1.0, 1e6);
  if (r.type == RopeScaling::Type::Linear) return;
  // transformers fills a missing original_max_position_embeddings with max_position_embeddings.
  r.original_max_position_embeddings =
      rope.integer_or("original_max_position_embeddings", c.max_position_embeddings, 1, 1 << 24);
  // transformers reads beta_fast and beta_slow with `or`: 0 means the default too.
  r.beta_fast = rope.number_or("beta_fast", 32, 0, 1e6);
  if (r.beta_fast == 0) r.beta_fast = 32;
  r.beta_slow = rope.number_or("beta_slow", 1, 0, 1e6);
  if (r.beta_slow == 0) r.beta_slow = 1;
  r.truncate = rope.boolean_or("truncate", true);
  auto get_mscale = [](double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; };
  if (rope.find("attention_factor")) {
    r.attention_factor = rope.number("attention_factor", 1e-6, 1e6);
  } else {
    const double mscale = rope.number_or("mscale", 0, 0, 1e6), all = rope.number_or("mscale_all_dim", 0, 0, 1e6);
    r.attention_factor = mscale != 0 && all != 0 ? get_mscale(r.factor, mscale) / get_mscale(r.factor, all)
                                                 : get_mscale(r.factor, 1);
  }
}

// The top-level rope_scaling of configs written before transformers 5 (null and {} mean none).
void read_legacy_rope_scaling(const FieldReader& f, ModelConfig& c) {
  const json* rs = f.find("rope_scaling");
  if (!rs || (rs->is_object() && rs->empty())) return;
  if (!rs->is_object()) fail("{}: {} {} must be an object", f.source, f.name("rope_scaling"), json_excerpt(*rs));
  if (c.rope_scaling.type != RopeScaling::Type::None)
    fail("{}: {} and rope_parameters both scale RoPE; give one", f.source, f.name("rope_scaling"));
  read_rope_scaling(FieldReader{*rs, f.source, f.prefix + "rope_scaling."}, c);
}

void parse_qwen3(const FieldReader& f, ModelConfig& c) {
  const std::string& source = f.source;
  c.architecture = Architecture::Qwen3;
  read_common_fields(f, 0, c);
  // transformers >= 5 writes RoPE settings under rope_parameters; published Qwen3 configs have a
  // top-level rope_theta and rope_scaling (null, {}, or an object naming its type). Accept both.
  if (const json* rp = f.find("rope_parameters")) {
    if (!rp->is_object()) fail("{}: field 'rope_parameters' must be an object", source);
    FieldReader rope{*rp, source, "rope_parameters."};
    read_rope_scaling(rope, c);
    c.rope_theta = f.find("rope_theta") ? f.number("rope_theta", 1.0, 1e12) : rope.number("rope_theta", 1.0, 1e12);
  } else {
    c.rope_theta = f.number("rope_theta", 1.0, 1e12);
  }
  read_legacy_rope_scaling(f, c);
  c.rotary_dim = c.head_dim;
}

// Qwen3.5's language model (Qwen3_5TextConfig): the shared fields plus the hybrid ones. Defaults are
// transformers' where it has one that published configs rely on (head_dim 256, partial rotary 0.25,
// layer_types from full_attention_interval); the DeltaNet shapes are required.
void parse_qwen35_text(const FieldReader& f, ModelConfig& c) {
  const std::string& source = f.source;
  c.architecture = Architecture::Qwen3_5;
  read_common_fields(f, 256, c);

  // RoPE: rope_parameters (transformers >= 5) or top-level fields; plain RoPE over the first
  // int(head_dim * partial_rotary_factor) dims. The mrope sections split those frequencies between
  // temporal, height and width positions; for text all three positions are the token index, so
  // the result is ordinary RoPE (transformers' Qwen3_5TextRotaryEmbedding with equal position rows).
  const json* rp = f.object_or_null("rope_parameters");
  const json empty = json::object();
  FieldReader rope{rp ? *rp : empty, source, f.prefix + "rope_parameters."};
  read_rope_scaling(rope, c);
  read_legacy_rope_scaling(f, c);
  c.rope_theta = rope.find("rope_theta") ? rope.number("rope_theta", 1.0, 1e12) : f.number("rope_theta", 1.0, 1e12);
  c.partial_rotary_factor = rope.find("partial_rotary_factor") ? rope.number("partial_rotary_factor", 0.0, 1.0)
                                                                : f.number_or("partial_rotary_factor", 0.25, 0.0, 1.0);
  c.rotary_dim = int(double(c.head_dim) * c.partial_rotary_factor);
  if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0)
    fail("{}: partial_rotary_factor {} of head_dim {} gives {} rotary dims; need an even number >= 2", source,
         c.partial_rotary_factor, c.head_dim, c.rotary_dim);
  if (const json* ms = rope.find("mrope_section")) {
    if (!ms->is_array()) fail("{}: field '{}' must be an array of integers", source, rope.name("mrope_section"));
    int total = 0;
    for (const json& v : *ms) total += c.mrope_section.emplace_back(rope.checked_int("mrope_section", v, 0, 1024));
    if (total > c.rotary_dim / 2)
      fail("{}: {} sums to {} frequencies, more than the {} of {} rotary dims", source, rope.name("mrope_section"),
           total, c.rotary_dim / 2, c.rotary_dim);
  }
  c.mrope_interleaved = rope.boolean_or("mrope_interleaved", false);

  // Full attention always has the output gate in transformers' Qwen3_5Attention; refuse a config that
  // says otherwise rather than run a different model.
  c.attn_output_gate = f.boolean_or("attn_output_gate", true);
  if (!c.attn_output_gate) fail("{}: {} = false is not supported", source, f.name("attn_output_gate"));
  if (const json* mlp_only = f.find("mlp_only_layers"); mlp_only && !(mlp_only->is_array() && mlp_only->empty()))
    fail("{}: {} {} is not supported (every layer has a token mixer)", source, f.name("mlp_only_layers"),
         json_excerpt(*mlp_only));

  c.linear_num_key_heads = f.integer("linear_num_key_heads", 1, 1024);
  c.linear_num_value_heads = f.integer("linear_num_value_heads", 1, 1024);
  c.linear_key_head_dim = f.integer("linear_key_head_dim", 1, 1024);
  c.linear_value_head_dim = f.integer("linear_value_head_dim", 1, 1024);
  c.linear_conv_kernel = f.integer("linear_conv_kernel_dim", 1, 64);
  if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
    fail("{}: linear_num_value_heads {} is not a multiple of linear_num_key_heads {}", source,
         c.linear_num_value_heads, c.linear_num_key_heads);
  c.mtp_num_hidden_layers = f.integer_or("mtp_num_hidden_layers", 0, 0, 1024);

  if (const json* lt = f.find("layer_types")) {
    if (!lt->is_array()) fail("{}: field '{}' must be an array of strings", source, f.name("layer_types"));
    if (lt->size() != size_t(c.num_layers))
      fail("{}: {} has {} entries but num_hidden_layers is {}", source, f.name("layer_types"), lt->size(),
           c.num_layers);
    for (size_t i = 0; i < lt->size(); ++i) {
      const json& v = (*lt)[i];
      if (v == "full_attention") c.layer_types.push_back(LayerType::FullAttention);
      else if (v == "linear_attention") c.layer_types.push_back(LayerType::LinearAttention);
      else fail("{}: {}[{}] = {} is not 'full_attention' or 'linear_attention'", source, f.name("layer_types"), i,
                json_excerpt(v));
    }
  } else {
    // transformers: every full_attention_interval-th layer is full attention, the rest linear.
    const int interval = f.integer_or("full_attention_interval", 4, 1, 1024);
    for (int i = 0; i < c.num_layers; ++i)
      c.layer_types.push_back((i + 1) % interval ? LayerType::LinearAttention : LayerType::FullAttention);
  }
}

}  // namespace

const char* layer_type_name(LayerType type) {
  return type == LayerType::FullAttention ? "full_attention" : "linear_attention";
}

int ModelConfig::count_layers(LayerType type) const {
  int n = 0;
  for (LayerType t : layer_types) n += t == type;
  return n;
}

int ModelConfig::context_limit() const {
  double limit = max_position_embeddings;
  if (rope_scaling.type == RopeScaling::Type::Linear) limit *= rope_scaling.factor;
  if (rope_scaling.type == RopeScaling::Type::Yarn)
    limit = std::max(limit, rope_scaling.original_max_position_embeddings * rope_scaling.factor);
  return int(std::min(limit, double(1 << 24)));
}

void ModelConfig::check_context(int context) const {
  if (context <= context_limit()) return;
  if (rope_scaling.type == RopeScaling::Type::None)
    fail("context {} exceeds the model's max_position_embeddings {}", context, max_position_embeddings);
  fail("context {} exceeds the model's {} positions (max_position_embeddings {}, stretched by its rope_scaling "
       "factor {})",
       context, context_limit(), max_position_embeddings, rope_scaling.factor);
}

int64_t ModelConfig::parameter_count() const {
  const int64_t H = hidden_size, D = head_dim, I = intermediate_size;
  const int64_t mlp = 3 * H * I;                   // gate, up, down
  const int64_t norms = 2 * H;                     // input and post-attention norms
  int64_t embed = int64_t(vocab_size) * H;
  int64_t layers = 0;
  if (!is_hybrid()) {
    int64_t per_layer = norms
                        + H * q_dim() + 2 * H * kv_dim()        // q, k, v
                        + int64_t(q_dim()) * H                  // o
                        + 2 * D                                 // q_norm, k_norm
                        + mlp;
    layers = num_layers * per_layer;
  } else {
    const int64_t full = (attn_output_gate ? 2 : 1) * H * q_dim() + 2 * H * kv_dim() + int64_t(q_dim()) * H + 2 * D;
    const int64_t conv = linear_conv_dim(), nv = linear_num_value_heads;
    const int64_t linear = H * conv + H * linear_value_dim() + 2 * H * nv   // in_proj_qkv, z, b, a
                           + conv * linear_conv_kernel + 2 * nv             // conv1d, A_log, dt_bias
                           + linear_value_head_dim + int64_t(linear_value_dim()) * H;  // norm, out_proj
    layers = count_layers(LayerType::FullAttention) * (norms + full + mlp) +
             count_layers(LayerType::LinearAttention) * (norms + linear + mlp);
  }
  return embed + layers + H + (tie_word_embeddings ? 0 : embed);
}

void override_rope_scaling(ModelConfig& c, std::string_view json_text, const std::string& source) {
  const json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail("{}: not a JSON object: {}", source, json_excerpt(j.is_discarded() ? json(std::string(json_text)) : j));
  c.rope_scaling = RopeScaling{};
  read_rope_scaling(FieldReader{j, source, ""}, c);
}

ModelConfig parse_model_config(std::string_view json_text, const std::string& source) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) fail("{}: not valid JSON", source);
  if (!root.is_object()) fail("{}: expected a JSON object at the top level", source);
  FieldReader f{root, source};

  ModelConfig c;
  c.model_type = f.string_or("model_type", "");
  if (c.model_type.empty()) fail("{}: missing required field 'model_type'", source);
  if (c.model_type == "qwen3") {
    parse_qwen3(f, c);
  } else if (c.model_type == "qwen3_5_text") {
    parse_qwen35_text(f, c);
  } else if (c.model_type == "qwen3_5") {
    // Qwen3_5ForConditionalGeneration: the language model is text_config; vision_config is not run.
    const json* text = f.object_or_null("text_config");
    if (!text) fail("{}: missing required field 'text_config' (the language model of a qwen3_5 folder)", source);
    FieldReader t{*text, source, "text_config."};
    if (std::string type = t.string_or("model_type", "qwen3_5_text"); type != "qwen3_5_text")
      fail("{}: text_config.model_type '{}' is not qwen3_5_text", source, type);
    parse_qwen35_text(t, c);
    // transformers ties the head from the wrapper's own flag; fall back to the text config's.
    c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", t.boolean_or("tie_word_embeddings", false));
    return c;
  } else {
    std::string arch;
    if (const json* a = f.find("architectures"); a && a->is_array() && !a->empty() && (*a)[0].is_string())
      arch = " (" + (*a)[0].get<std::string>() + ")";
    fail("{}: unsupported architecture '{}'{}; supported: qwen3, qwen3_5, qwen3_5_text", source, c.model_type, arch);
  }
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", false);
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

#include "megaqwen/model/synth.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "megaqwen/util/bf16.h"
#include "megaqwen/util/error.h"
#include "megaqwen/util/thread_pool.h"

namespace megaqwen {

namespace fs = std::filesystem;

namespace {

ModelConfig qwen3_shape(int hidden, int layers, int heads, int kv_heads, int intermediate, bool tied) {
  ModelConfig c;
  c.model_type = "qwen3";
  c.hidden_size = hidden;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = 128;
  c.intermediate_size = intermediate;
  c.vocab_size = 151936;
  c.max_position_embeddings = 40960;
  c.rope_theta = 1000000.0;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = tied;
  c.torch_dtype = "bfloat16";
  c.bos_token_id = 151643;
  c.eos_token_ids = {151645};
  return c;
}

// A Qwen3.5 hybrid language model. `wrapper`: written as Qwen3_5ForConditionalGeneration (model_type
// qwen3_5, text under text_config, tensors under model.language_model.) like the published folders;
// otherwise as a text-only qwen3_5_text folder (tensors under model.).
ModelConfig qwen35_shape(int hidden, std::vector<LayerType> layers, int heads, int kv_heads, int head_dim,
                         int intermediate, int key_heads, int value_heads, int key_dim, int value_dim, bool wrapper) {
  ModelConfig c;
  c.architecture = Architecture::Qwen3_5;
  c.model_type = wrapper ? "qwen3_5" : "qwen3_5_text";
  c.hidden_size = hidden;
  c.num_layers = int(layers.size());
  c.layer_types = std::move(layers);
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.intermediate_size = intermediate;
  c.vocab_size = 248320;
  c.max_position_embeddings = 262144;
  c.rope_theta = 10000000.0;
  c.partial_rotary_factor = 0.25;
  c.rotary_dim = head_dim / 4;
  // The published 0.8B splits its 32 rotary frequencies 11/11/10; scale that to smaller heads.
  const int freqs = c.rotary_dim / 2;
  c.mrope_section = {freqs * 11 / 32, freqs * 11 / 32, freqs - 2 * (freqs * 11 / 32)};
  c.mrope_interleaved = true;
  c.attn_output_gate = true;
  c.linear_num_key_heads = key_heads;
  c.linear_num_value_heads = value_heads;
  c.linear_key_head_dim = key_dim;
  c.linear_value_head_dim = value_dim;
  c.linear_conv_kernel = 4;
  c.mtp_num_hidden_layers = 0;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = true;
  c.torch_dtype = "bfloat16";
  c.eos_token_ids = {248044};
  return c;
}

// [linear, linear, linear, full] x n: the published Qwen3.5 pattern (full_attention_interval 4).
std::vector<LayerType> every_fourth_full(int n_groups) {
  std::vector<LayerType> t;
  for (int i = 0; i < 4 * n_groups; ++i) t.push_back(i % 4 == 3 ? LayerType::FullAttention : LayerType::LinearAttention);
  return t;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// How one tensor's values are drawn: uniform in [center - half_width, center + half_width].
struct Distribution {
  float center, half_width;
};

struct SynthTensor {
  TensorSpec spec;
  Distribution dist;
};

std::vector<SynthTensor> qwen3_tensors(const ModelConfig& c, DType dtype) {
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  const float sqrt3 = std::sqrt(3.0f);
  auto linear = [&](int64_t in) { return Distribution{0.0f, sqrt3 / std::sqrt(float(in))}; };
  const Distribution norm{1.0f, 0.1f}, embed{0.0f, sqrt3 * 2.5f / std::sqrt(float(H))};
  std::vector<SynthTensor> t;
  auto add = [&](std::string name, std::vector<int64_t> shape, Distribution d) {
    t.push_back({TensorSpec{std::move(name), dtype, std::move(shape)}, d});
  };
  add("model.embed_tokens.weight", {V, H}, embed);
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {H}, norm);
    add(p + "self_attn.q_proj.weight", {c.q_dim(), H}, linear(H));
    add(p + "self_attn.k_proj.weight", {c.kv_dim(), H}, linear(H));
    add(p + "self_attn.v_proj.weight", {c.kv_dim(), H}, linear(H));
    add(p + "self_attn.q_norm.weight", {D}, norm);
    add(p + "self_attn.k_norm.weight", {D}, norm);
    add(p + "self_attn.o_proj.weight", {H, c.q_dim()}, linear(c.q_dim()));
    add(p + "post_attention_layernorm.weight", {H}, norm);
    add(p + "mlp.gate_proj.weight", {I, H}, linear(H));
    add(p + "mlp.up_proj.weight", {I, H}, linear(H));
    add(p + "mlp.down_proj.weight", {H, I}, linear(I));
  }
  add("model.norm.weight", {H}, norm);
  if (!c.tie_word_embeddings) add("lm_head.weight", {V, H}, embed);
  return t;
}

// Qwen3.5: norms with a (1 + w) scale are drawn around 0 (zero-centred, as stored); the gated norm's
// plain weight around 1. A_log and the gated norm are float32 as in the published checkpoints; A_log in
// [0, 2] gives decays exp(g) well inside (0, 1), dt_bias near transformers' initial 1.
std::vector<SynthTensor> qwen35_tensors(const ModelConfig& c, DType dtype) {
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  const int64_t C = c.linear_conv_dim(), Vd = c.linear_value_dim(), nv = c.linear_num_value_heads;
  const float sqrt3 = std::sqrt(3.0f);
  auto linear = [&](int64_t in) { return Distribution{0.0f, sqrt3 / std::sqrt(float(in))}; };
  const Distribution centred_norm{0.0f, 0.1f}, plain_norm{1.0f, 0.1f}, embed{0.0f, sqrt3 * 2.5f / std::sqrt(float(H))};
  const Distribution a_log{1.0f, 1.0f}, dt_bias{1.0f, 0.2f};
  std::vector<SynthTensor> t;
  auto add = [&](std::string name, std::vector<int64_t> shape, Distribution d, DType type) {
    t.push_back({TensorSpec{std::move(name), type, std::move(shape)}, d});
  };
  const std::string m = c.model_type == "qwen3_5" ? "model.language_model." : "model.";
  add(m + "embed_tokens.weight", {V, H}, embed, dtype);
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = m + "layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {H}, centred_norm, dtype);
    if (c.layer_types[size_t(i)] == LayerType::FullAttention) {
      add(p + "self_attn.q_proj.weight", {2 * int64_t(c.q_dim()), H}, linear(H), dtype);
      add(p + "self_attn.k_proj.weight", {c.kv_dim(), H}, linear(H), dtype);
      add(p + "self_attn.v_proj.weight", {c.kv_dim(), H}, linear(H), dtype);
      add(p + "self_attn.q_norm.weight", {D}, centred_norm, dtype);
      add(p + "self_attn.k_norm.weight", {D}, centred_norm, dtype);
      add(p + "self_attn.o_proj.weight", {H, c.q_dim()}, linear(c.q_dim()), dtype);
    } else {
      add(p + "linear_attn.in_proj_qkv.weight", {C, H}, linear(H), dtype);
      add(p + "linear_attn.in_proj_z.weight", {Vd, H}, linear(H), dtype);
      add(p + "linear_attn.in_proj_b.weight", {nv, H}, linear(H), dtype);
      add(p + "linear_attn.in_proj_a.weight", {nv, H}, linear(H), dtype);
      add(p + "linear_attn.conv1d.weight", {C, 1, c.linear_conv_kernel}, linear(c.linear_conv_kernel), dtype);
      add(p + "linear_attn.dt_bias", {nv}, dt_bias, dtype);
      add(p + "linear_attn.A_log", {nv}, a_log, DType::F32);
      add(p + "linear_attn.norm.weight", {c.linear_value_head_dim}, plain_norm, DType::F32);
      add(p + "linear_attn.out_proj.weight", {H, Vd}, linear(Vd), dtype);
    }
    add(p + "post_attention_layernorm.weight", {H}, centred_norm, dtype);
    add(p + "mlp.gate_proj.weight", {I, H}, linear(H), dtype);
    add(p + "mlp.up_proj.weight", {I, H}, linear(H), dtype);
    add(p + "mlp.down_proj.weight", {H, I}, linear(I), dtype);
  }
  add(m + "norm.weight", {H}, centred_norm, dtype);
  if (!c.tie_word_embeddings) add("lm_head.weight", {V, H}, embed, dtype);
  return t;
}

std::vector<SynthTensor> synth_tensors(const ModelConfig& c, DType dtype) {
  return c.is_hybrid() ? qwen35_tensors(c, dtype) : qwen3_tensors(c, dtype);
}

// Fills elements [first, first + count) of a tensor. Each block of kBlock elements has its own
// generator keyed by (seed, tensor, block), so the bytes do not depend on threads or chunking.
constexpr int64_t kBlock = 1 << 16;

void fill_block(uint64_t seed, size_t tensor, int64_t block, Distribution d, DType dtype, uint8_t* out, int64_t count) {
  uint64_t s = splitmix64(seed ^ splitmix64((uint64_t(tensor) << 32) ^ uint64_t(block)));
  for (int64_t i = 0; i < count; ++i) {
    s = splitmix64(s);
    const float u = float(double(s >> 11) * 0x1.0p-53) * 2.0f - 1.0f;  // [-1, 1)
    const float v = d.center + d.half_width * u;
    switch (dtype) {
      case DType::BF16: reinterpret_cast<uint16_t*>(out)[i] = f32_to_bf16(v); break;
      case DType::F16: reinterpret_cast<uint16_t*>(out)[i] = f32_to_f16(v); break;
      default: reinterpret_cast<float*>(out)[i] = v; break;
    }
  }
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !out.write(text.data(), std::streamsize(text.size()))) fail("cannot write {}", path.string());
}

}  // namespace

const std::vector<SynthPreset>& synth_presets() {
  static const std::vector<SynthPreset> presets = [] {
    std::vector<SynthPreset> p;
    ModelConfig tiny = qwen3_shape(/*hidden=*/64, /*layers=*/2, /*heads=*/4, /*kv_heads=*/2, /*intermediate=*/128, true);
    p.push_back({"tiny", "2 layers, hidden 64, Qwen3 vocabulary (~20 MB): for tests", tiny});
    p.push_back({"qwen3-0.6b", "Qwen3-0.6B shapes (28 layers, hidden 1024)", qwen3_shape(1024, 28, 16, 8, 3072, true)});
    p.push_back({"qwen3-1.7b", "Qwen3-1.7B shapes (28 layers, hidden 2048)", qwen3_shape(2048, 28, 16, 8, 6144, true)});
    p.push_back({"qwen3-4b", "Qwen3-4B shapes (36 layers, hidden 2560)", qwen3_shape(2560, 36, 32, 8, 9728, true)});
    using enum LayerType;
    p.push_back({"tiny-hybrid",
                 "Qwen3.5 hybrid, layers [linear, full], hidden 64, Qwen3.5 vocabulary (~32 MB): for tests",
                 qwen35_shape(64, {LinearAttention, FullAttention}, 4, 2, 64, 128, 2, 2, 32, 32, /*wrapper=*/true)});
    p.push_back({"tiny-hybrid-gqa",
                 "Qwen3.5 text-only, layers [full, linear, linear], 2 value heads per key head (~32 MB): for tests",
                 qwen35_shape(64, {FullAttention, LinearAttention, LinearAttention}, 4, 1, 64, 96, 2, 4, 16, 32,
                              /*wrapper=*/false)});
    ModelConfig q35 = qwen35_shape(1024, every_fourth_full(6), 8, 2, 256, 3584, 16, 16, 128, 128, /*wrapper=*/true);
    q35.mtp_num_hidden_layers = 1;  // as published (the mtp.* tensors are not written)
    p.push_back({"qwen3.5-0.8b", "Qwen3.5-0.8B language model shapes (24 layers: 18 DeltaNet, 6 attention; hidden 1024)",
                 q35});
    return p;
  }();
  return presets;
}

const SynthPreset& find_synth_preset(const std::string& name) {
  std::string names;
  for (const auto& p : synth_presets()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  fail("unknown preset '{}'; choose one of: {}", name, names);
}

namespace {

// Qwen3_5TextConfig's fields, in the published file's order.
nlohmann::ordered_json qwen35_text_config_json(const ModelConfig& c) {
  nlohmann::ordered_json j;
  if (c.model_type == "qwen3_5_text") j["architectures"] = {"Qwen3_5ForCausalLM"};
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["attn_output_gate"] = c.attn_output_gate;
  j["dtype"] = c.torch_dtype;
  j["eos_token_id"] = c.eos_token_ids.size() == 1 ? nlohmann::ordered_json(c.eos_token_ids[0])
                                                   : nlohmann::ordered_json(c.eos_token_ids);
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = c.intermediate_size;
  nlohmann::ordered_json types = nlohmann::ordered_json::array();
  for (LayerType t : c.layer_types) types.push_back(layer_type_name(t));
  j["layer_types"] = types;
  j["linear_conv_kernel_dim"] = c.linear_conv_kernel;
  j["linear_key_head_dim"] = c.linear_key_head_dim;
  j["linear_num_key_heads"] = c.linear_num_key_heads;
  j["linear_num_value_heads"] = c.linear_num_value_heads;
  j["linear_value_head_dim"] = c.linear_value_head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["mlp_only_layers"] = nlohmann::ordered_json::array();
  j["model_type"] = "qwen3_5_text";
  j["mtp_num_hidden_layers"] = c.mtp_num_hidden_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_hidden_layers"] = c.num_layers;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab_size;
  j["rope_parameters"] = {{"mrope_interleaved", c.mrope_interleaved}, {"mrope_section", c.mrope_section},
                          {"rope_type", "default"}, {"rope_theta", c.rope_theta},
                          {"partial_rotary_factor", c.partial_rotary_factor}};
  return j;
}

// The published Qwen3.5-0.8B wrapper: the text model under text_config, and its vision tower's config
// (this engine does not run it; the folder has no model.visual.* tensors).
std::string qwen35_config_json(const ModelConfig& c) {
  if (c.model_type == "qwen3_5_text") return qwen35_text_config_json(c).dump(2) + "\n";
  nlohmann::ordered_json j;
  j["architectures"] = {"Qwen3_5ForConditionalGeneration"};
  j["image_token_id"] = 248056;
  j["model_type"] = "qwen3_5";
  j["text_config"] = qwen35_text_config_json(c);
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["video_token_id"] = 248057;
  j["vision_config"] = {{"deepstack_visual_indexes", nlohmann::ordered_json::array()}, {"depth", 12},
                        {"hidden_act", "gelu_pytorch_tanh"}, {"hidden_size", 768}, {"in_channels", 3},
                        {"initializer_range", 0.02}, {"intermediate_size", 3072}, {"model_type", "qwen3_5"},
                        {"num_heads", 12}, {"num_position_embeddings", 2304}, {"out_hidden_size", c.hidden_size},
                        {"patch_size", 16}, {"spatial_merge_size", 2}, {"temporal_patch_size", 2}};
  j["vision_end_token_id"] = 248054;
  j["vision_start_token_id"] = 248053;
  return j.dump(2) + "\n";
}

}  // namespace

std::string model_config_json(const ModelConfig& c) {
  if (c.is_hybrid()) return qwen35_config_json(c);
  nlohmann::ordered_json j;
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_ids.size() == 1 ? nlohmann::ordered_json(c.eos_token_ids[0])
                                                   : nlohmann::ordered_json(c.eos_token_ids);
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = c.intermediate_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["max_window_layers"] = c.num_layers;
  j["model_type"] = c.model_type;
  j["num_attention_heads"] = c.num_heads;
  j["num_hidden_layers"] = c.num_layers;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_scaling"] = nullptr;
  j["rope_theta"] = c.rope_theta;
  j["sliding_window"] = nullptr;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = c.torch_dtype;
  j["use_cache"] = true;
  j["use_sliding_window"] = false;
  j["vocab_size"] = c.vocab_size;
  return j.dump(2) + "\n";
}

void write_synthetic_model(const SynthOptions& o) {
  const SynthPreset& preset = find_synth_preset(o.preset);
  ModelConfig config = preset.config;
  if (o.vocab_size < 0) fail("a vocabulary of {} tokens", o.vocab_size);
  if (o.num_layers < 0) fail("a model of {} layers", o.num_layers);
  if (o.num_layers > 0) {
    if (config.is_hybrid()) {  // the preset's layer pattern, repeated or cut to num_layers
      std::vector<LayerType> types;
      for (int l = 0; l < o.num_layers; ++l) types.push_back(config.layer_types[size_t(l) % config.layer_types.size()]);
      config.layer_types = std::move(types);
    }
    config.num_layers = o.num_layers;
  }
  if (o.vocab_size > 0) {
    if (!o.tokenizer_dir.empty()) fail("a vocabulary size other than the preset's cannot take the tokenizer files");
    config.vocab_size = o.vocab_size;
    // Special ids must lie in the vocabulary: the last id ends a sequence, there is no bos.
    config.bos_token_id = -1;
    config.eos_token_ids = {o.vocab_size - 1};
  }
  config.torch_dtype = o.dtype == DType::BF16 ? "bfloat16" : o.dtype == DType::F16 ? "float16" : "float32";
  if (o.dtype != DType::BF16 && o.dtype != DType::F16 && o.dtype != DType::F32)
    fail("synthetic weights can be BF16, F16 or F32, not {}", dtype_name(o.dtype));
  if (o.out_dir.empty()) fail("no output folder given");
  fs::create_directories(o.out_dir);

  // Tokenizer files first: a bad --tokenizer folder fails before minutes of weight writing.
  bool has_generation_config = false;
  if (!o.tokenizer_dir.empty()) {
    if (!fs::is_directory(o.tokenizer_dir)) fail("tokenizer folder {} does not exist", o.tokenizer_dir.string());
    int copied = 0;
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                             "chat_template.jinja", "generation_config.json"}) {
      fs::path from = o.tokenizer_dir / name;
      if (!fs::exists(from)) continue;
      fs::copy_file(from, o.out_dir / name, fs::copy_options::overwrite_existing);
      // Sources may be read-only (shared/); the copy belongs to the user, so a rerun can overwrite it.
      fs::permissions(o.out_dir / name, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
      copied += std::string(name) != "generation_config.json";
      has_generation_config |= std::string(name) == "generation_config.json";
    }
    if (copied == 0) fail("{} holds no tokenizer files (tokenizer.json or vocab.json + merges.txt)", o.tokenizer_dir.string());
  }
  write_text(o.out_dir / "config.json", model_config_json(config));
  if (!has_generation_config && o.vocab_size > 0) {
    const nlohmann::ordered_json g{{"do_sample", true}, {"eos_token_id", config.eos_token_ids}, {"temperature", 0.6},
                                   {"top_k", 20}, {"top_p", 0.95}};
    write_text(o.out_dir / "generation_config.json", g.dump(2) + "\n");
  } else if (!has_generation_config) {
    // Stop on <|im_end|> and <|endoftext|> of the model's vocabulary.
    nlohmann::ordered_json g = config.is_hybrid()
        ? nlohmann::ordered_json{{"do_sample", true}, {"eos_token_id", {248046, 248044}}, {"pad_token_id", 248044},
                                 {"temperature", 0.6}, {"top_k", 20}, {"top_p", 0.95}}
        : nlohmann::ordered_json{{"bos_token_id", config.bos_token_id}, {"do_sample", true},
                                 {"eos_token_id", {151645, 151643}}, {"pad_token_id", 151643},
                                 {"temperature", 0.6}, {"top_k", 20}, {"top_p", 0.95}};
    write_text(o.out_dir / "generation_config.json", g.dump(2) + "\n");
  }

  std::vector<SynthTensor> tensors = synth_tensors(config, o.dtype);
  std::vector<TensorSpec> specs;
  for (const auto& t : tensors) specs.push_back(t.spec);
  SafetensorsWriter writer(o.out_dir / "model.safetensors", specs,
                           {{"format", "pt"}, {"megaqwen_synth", o.preset + " seed " + std::to_string(o.seed)}});
  ThreadPool pool(o.threads);
  constexpr int64_t kChunkBlocks = 256;  // 16M elements per write
  std::vector<uint8_t> buffer;
  for (size_t ti = 0; ti < tensors.size(); ++ti) {
    const DType dtype = tensors[ti].spec.dtype;  // Qwen3.5 keeps A_log and the gated norm in F32
    const size_t esize = dtype_size(dtype);
    const int64_t n = tensors[ti].spec.byte_size() / esize;
    for (int64_t first_block = 0; first_block * kBlock < n; first_block += kChunkBlocks) {
      const int64_t begin = first_block * kBlock, end = std::min(n, (first_block + kChunkBlocks) * kBlock);
      buffer.resize(size_t(end - begin) * esize);
      const int64_t blocks = (end - begin + kBlock - 1) / kBlock;
      pool.parallel_for(size_t(blocks), [&](size_t b0, size_t b1) {
        for (size_t b = b0; b < b1; ++b) {
          const int64_t first = begin + int64_t(b) * kBlock, count = std::min(kBlock, end - first);
          fill_block(o.seed, ti, first_block + int64_t(b), tensors[ti].dist, dtype,
                     buffer.data() + size_t(first - begin) * esize, count);
        }
      });
      writer.write(buffer);
    }
  }
  writer.finish();
}

}  // namespace megaqwen

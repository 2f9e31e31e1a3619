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

std::vector<SynthTensor> synth_tensors(const ModelConfig& c, DType dtype) {
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

std::string model_config_json(const ModelConfig& c) {
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
  if (!has_generation_config) {
    nlohmann::ordered_json g = {{"bos_token_id", config.bos_token_id}, {"do_sample", true},
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
  const size_t esize = dtype_size(o.dtype);
  constexpr int64_t kChunkBlocks = 256;  // 16M elements per write
  std::vector<uint8_t> buffer;
  for (size_t ti = 0; ti < tensors.size(); ++ti) {
    const int64_t n = tensors[ti].spec.byte_size() / esize;
    for (int64_t first_block = 0; first_block * kBlock < n; first_block += kChunkBlocks) {
      const int64_t begin = first_block * kBlock, end = std::min(n, (first_block + kChunkBlocks) * kBlock);
      buffer.resize(size_t(end - begin) * esize);
      const int64_t blocks = (end - begin + kBlock - 1) / kBlock;
      pool.parallel_for(size_t(blocks), [&](size_t b0, size_t b1) {
        for (size_t b = b0; b < b1; ++b) {
          const int64_t first = begin + int64_t(b) * kBlock, count = std::min(kBlock, end - first);
          fill_block(o.seed, ti, first_block + int64_t(b), tensors[ti].dist, o.dtype,
                     buffer.data() + size_t(first - begin) * esize, count);
        }
      });
      writer.write(buffer);
    }
  }
  writer.finish();
}

}  // namespace megaqwen

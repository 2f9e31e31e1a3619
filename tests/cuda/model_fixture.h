// Synthetic models for the GPU engine tests, written once per test binary into a temporary folder
// (only when a GPU is present: the tests skip before asking for one).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "megaqwen/model/model.h"
#include "megaqwen/model/synth.h"
#include "cuda/gpu_test_util.h"
#include "test_paths.h"

namespace megaqwen::test {

// The tiny model's vocabulary on the emulated device: 4,099 ids instead of 151,936 (the LM head and
// the token selection dominate an emulated step otherwise; odd, so CTA slices stay ragged).
constexpr int kEmulatedTinyVocab = 4099;

inline std::filesystem::path synth_model_dir(const std::string& preset, int vocab_size = 0) {
  const std::string suffix = vocab_size ? "-v" + std::to_string(vocab_size) : "";
  const auto dir = test::process_temp_dir("megaqwen-test-cuda-" + preset + suffix);
  if (!std::filesystem::exists(dir / "model.safetensors")) {
    SynthOptions o;
    o.preset = preset;
    o.seed = 0;
    o.vocab_size = vocab_size;
    o.out_dir = dir;
    write_synthetic_model(o);
  }
  return dir;
}

// The tiny preset (2 layers, hidden 64, head_dim 128, GQA 2, the real 151,936-token vocabulary; on
// the emulated device kEmulatedTinyVocab).
inline std::shared_ptr<const Model> tiny_model() {
  static std::shared_ptr<const Model> model =
      load_model(synth_model_dir("tiny", kEmulatedDevice ? kEmulatedTinyVocab : 0).string());
  return model;
}

// The Qwen3.5 test presets ("tiny-hybrid": [linear, full], head_dim 64, rotary 16; "tiny-hybrid-gqa":
// [full, linear, linear], 4 query heads on 1 kv head, 2 value heads per key head), with the real
// 248,320-token vocabulary (kEmulatedTinyVocab on the emulated device).
inline std::shared_ptr<const Model> tiny_hybrid_model(const std::string& preset) {
  return load_model(synth_model_dir(preset, kEmulatedDevice ? kEmulatedTinyVocab : 0).string());
}

// Qwen3.5-0.8B's language-model shapes: MEGAQWEN_TEST_QWEN35_08B names an existing folder
// (scripts/gpu-check.sh's hybrid stage passes its own), else one is written to the temporary folder.
inline std::shared_ptr<const Model> qwen35_full_model() {
  static std::shared_ptr<const Model> model = [] {
    const char* env = std::getenv("MEGAQWEN_TEST_QWEN35_08B");
    return load_model(env && *env ? std::string(env) : synth_model_dir("qwen3.5-0.8b").string());
  }();
  return model;
}

// A copy of the model in `dir` with YaRN RoPE scaling, factor 4 over an original context of 64 (so
// a prompt of 100 tokens runs past it and every frequency band is exercised): config.json patched
// (rope_parameters where the config has them, else rope_scaling), the weights linked.
inline std::shared_ptr<const Model> yarn_variant(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  const fs::path out = dir.string() + "-yarn";
  if (!fs::exists(out / "config.json")) {
    fs::create_directories(out);
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename() != "config.json" && !fs::exists(out / e.path().filename()))
        fs::create_symlink(fs::absolute(e.path()), out / e.path().filename());
    nlohmann::json config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
    const nlohmann::json yarn = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}};
    nlohmann::json& text = config.contains("text_config") ? config["text_config"] : config;
    if (text.contains("rope_parameters")) {
      for (const auto& [k, v] : yarn.items()) text["rope_parameters"][k] = v;
    } else {
      config["rope_scaling"] = yarn;
    }
    std::ofstream(out / "config.json") << config.dump(2);
  }
  return load_model(out.string());
}

// n token ids below 151,000 (below 4,000 on the emulated device: inside the tiny model's vocabulary).
inline std::vector<int32_t> random_ids(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = int32_t(rng() % (kEmulatedDevice ? 4000 : 151000));
  return ids;
}

// Full Qwen3-0.6B shapes: MEGAQWEN_TEST_QWEN3_06B names an existing folder (scripts/gpu-check.sh
// passes the one it wrote for the benchmark), else one is written to the temporary folder (~1.2 GB).
inline std::shared_ptr<const Model> full_model() {
  static std::shared_ptr<const Model> model = [] {
    const char* env = std::getenv("MEGAQWEN_TEST_QWEN3_06B");
    return load_model(env && *env ? std::string(env) : synth_model_dir("qwen3-0.6b").string());
  }();
  return model;
}

}  // namespace megaqwen::test

// Synthetic models: Hugging Face folders with seeded random weights at the exact shapes of real
// Qwen3 and Qwen3.5 models, so benchmarks and GPU tests get a full-size model without a download.
// Qwen3.5 presets are written as the published folders are (the Qwen3_5ForConditionalGeneration
// config, model.language_model.* names, A_log and the gated norm in F32; no vision or MTP tensors),
// or as a text-only qwen3_5_text folder (tiny-hybrid-gqa).
// Scales keep activations realistic: linear weights ~ U with std 1/sqrt(in) (unit-variance outputs),
// norm weights near 1, embeddings with std 2.5/sqrt(H) (logits with std ~2.5 through the tied head).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "megaqwen/model/config.h"
#include "megaqwen/model/safetensors.h"

namespace megaqwen {

struct SynthPreset {
  std::string name;
  std::string description;
  ModelConfig config;
};

const std::vector<SynthPreset>& synth_presets();  // tiny, qwen3-0.6b, ..., tiny-hybrid, qwen3.5-0.8b
const SynthPreset& find_synth_preset(const std::string& name);  // Error listing the names

struct SynthOptions {
  std::string preset = "tiny";
  uint64_t seed = 0;
  DType dtype = DType::BF16;
  std::filesystem::path out_dir;
  std::filesystem::path tokenizer_dir;  // tokenizer files copied from here when not empty
  int vocab_size = 0;                   // > 0: this vocabulary instead of the preset's (fast emulator
                                        // tests; the model then has no matching tokenizer)
  int num_layers = 0;                   // > 0: this many layers instead of the preset's (a hybrid's
                                        // layer pattern repeated or cut to them)
  int threads = 0;
};

// Writes config.json, generation_config.json, model.safetensors and the tokenizer files.
void write_synthetic_model(const SynthOptions& options);

// config.json text for a config, in Hugging Face's layout.
std::string model_config_json(const ModelConfig& config);

}  // namespace megaqwen

// Synthetic models for the GPU engine tests, written once per test binary into a temporary folder
// (only when a GPU is present: the tests skip before asking for one).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "megaqwen/model/model.h"
#include "megaqwen/model/synth.h"
#include "test_paths.h"

namespace megaqwen::test {

inline std::filesystem::path synth_model_dir(const std::string& preset) {
  const auto dir = test::process_temp_dir("megaqwen-test-cuda-" + preset);
  if (!std::filesystem::exists(dir / "model.safetensors")) {
    SynthOptions o;
    o.preset = preset;
    o.seed = 0;
    o.out_dir = dir;
    write_synthetic_model(o);
  }
  return dir;
}

// The tiny preset (2 layers, hidden 64, head_dim 128, GQA 2, the real 151,936-token vocabulary).
inline std::shared_ptr<const Model> tiny_model() {
  static std::shared_ptr<const Model> model = load_model(synth_model_dir("tiny").string());
  return model;
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

// Model: everything loaded from a model folder that the engines share: the validated config, the
// mapped checkpoint and the typed weight views over it. Immutable once loaded.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "megaqwen/model/checkpoint.h"
#include "megaqwen/model/config.h"
#include "megaqwen/model/qwen3_weights.h"

namespace megaqwen {

struct Model {
  std::filesystem::path dir;
  ModelConfig config;
  std::unique_ptr<Checkpoint> checkpoint;
  Qwen3Weights weights;
};

// `model` is a folder or a Hugging Face model id in the local cache (see resolve_model_dir).
std::shared_ptr<const Model> load_model(const std::string& model);

}  // namespace megaqwen

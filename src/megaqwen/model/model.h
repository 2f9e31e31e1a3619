// Model: everything loaded from a model folder that the engines share: the validated config, the
// mapped checkpoint and the typed weight views over it. Immutable once loaded.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "megaqwen/model/checkpoint.h"
#include "megaqwen/model/config.h"
#include "megaqwen/model/qwen35_weights.h"
#include "megaqwen/model/qwen3_weights.h"

namespace megaqwen {

struct Model {
  std::filesystem::path dir;
  ModelConfig config;
  std::unique_ptr<Checkpoint> checkpoint;
  Qwen3Weights weights;                  // Architecture::Qwen3 (empty for a hybrid model)
  std::optional<Qwen35Weights> qwen35;   // Architecture::Qwen3_5 (hybrid) only

  // Weight bytes one decode step reads, whichever architecture.
  uint64_t weight_bytes_per_token() const { return qwen35 ? qwen35->bytes_per_token() : weights.bytes_per_token(); }
};

// `model` is a folder or a Hugging Face model id in the local cache (see resolve_model_dir).
// `rope_scaling`, when not empty, replaces the config's RoPE scaling (override_rope_scaling; the
// CLI's --rope-scaling), so a read-only checkpoint can run past its trained context.
std::shared_ptr<const Model> load_model(const std::string& model, const std::string& rope_scaling = "");

}  // namespace megaqwen

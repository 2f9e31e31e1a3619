// Flags shared by several subcommands, declared once: the model and engine choice, and sampling.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "megaqwen/engine/create_engine.h"
#include "megaqwen/model/model.h"
#include "megaqwen/sampling/sampler.h"
#include "megaqwen/tokenizer/tokenizer.h"

namespace megaqwen::cli {

struct ModelArgs {
  std::string model;
  std::string rope_scaling;  // JSON; replaces config.json's RoPE scaling
  EngineOptions engine;
  void add_to(CLI::App* cmd, bool with_engine = true);
  std::shared_ptr<const Model> load() const { return load_model(model, rope_scaling); }
};

// Flags left unset fall back to the model's generation_config.json, then to the library defaults.
struct SamplingArgs {
  std::optional<float> temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
  std::optional<int> top_k;
  uint64_t seed = 0;
  bool greedy = false;
  void add_to(CLI::App* cmd);
  SamplingParams resolve(const SamplingParams& defaults) const;
};

// The tokenizer of a model folder. Absent files: an Error saying to give --ids when `required`,
// otherwise nullopt (as is a tokenizer that fails to load when not required).
std::optional<Tokenizer> load_model_tokenizer(const std::filesystem::path& dir, bool required);

// "1 2 3" or "1,2,3" -> ids; Error on anything that is not an integer.
std::vector<int32_t> parse_token_ids(const std::string& text);

// llama.cpp's --logit-bias form: TOKEN_ID+BIAS or TOKEN_ID-BIAS ("15043+1", "15043-inf" bans the
// token); Error naming the spec that is malformed or whose id is not below `vocab_size`.
LogitBias parse_logit_bias(const std::string& spec, int32_t vocab_size);

}  // namespace megaqwen::cli

// Sampler: turns the logits of one position into the next token id.
// Order, as transformers applies it: penalties (repetition, presence, frequency) on the raw logits,
// then temperature, then the top-k, top-p and min-p filters, then a draw. Temperature 0 is greedy
// (argmax, lowest id on ties, so runs are reproducible and match the GPU engines).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <vector>

namespace megaqwen {

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off; divides positive logits of seen tokens, multiplies negative ones
  float presence_penalty = 0.0f;    // subtracted once from every seen token (OpenAI convention)
  float frequency_penalty = 0.0f;   // subtracted per occurrence of a seen token
  uint64_t seed = 0;

  bool greedy() const { return temperature <= 0.0f; }
  void validate() const;  // throws Error naming the bad field
};

// A fixed amount added to one token's logit before sampling (OpenAI's logit_bias).
struct LogitBias {
  int32_t token;
  float bias;
};

// Sampling defaults and stop ids from a model folder's generation_config.json (absent file: Qwen's
// thinking-mode defaults are NOT assumed; plain temperature 1 sampling).
struct GenerationDefaults {
  SamplingParams sampling;
  std::vector<int32_t> eos_token_ids;
};
GenerationDefaults load_generation_defaults(const std::filesystem::path& model_dir);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  const SamplingParams& params() const { return params_; }
  // `logits` is modified in place (penalties, temperature, filters). `history` holds the tokens the
  // penalties look at (prompt and generated, as transformers does for the repetition penalty).
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);

  // The distribution sample() draws from, without drawing (the generator state is untouched): the
  // kept candidates, most likely first, with probabilities summing to 1 (greedy: the argmax alone).
  // For tests of other samplers (the GPU ones) against this reference.
  struct Candidate {
    int32_t id;
    double prob;
  };
  std::vector<Candidate> distribution(std::span<float> logits, std::span<const int32_t> history);

 private:
  // Penalties, then (not greedy) temperature, the sorted candidates and the filters: order_[0, keep)
  // with probs_[i] (normalized over the top-k set, before the top-p / min-p cuts). Returns keep, or 0
  // for greedy (the answer is then argmax(logits)).
  size_t filter(std::span<float> logits, std::span<const int32_t> history);

  double next_uniform();  // [0, 1), from the seeded generator

  SamplingParams params_;
  uint64_t state_[4];
  std::vector<int32_t> order_;  // scratch: candidate ids
  std::vector<int32_t> counts_; // scratch: occurrences per id
  std::vector<double> probs_;   // scratch: candidate probabilities
};

// Index of the largest value, lowest index on ties.
int32_t argmax(std::span<const float> values);

}  // namespace megaqwen

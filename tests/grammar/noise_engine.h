// NoiseEngine: a model of random logits, so every draw is a fresh random choice among what a
// constraint's mask leaves; noise_request: a constrained request for it. Test-only.
#pragma once

#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "megaqwen/engine/engine.h"
#include "megaqwen/engine/generator.h"
#include "megaqwen/grammar/token_trie.h"
#include "megaqwen/util/error.h"

namespace megaqwen::test {

class NoiseEngine final : public Engine {
 public:
  explicit NoiseEngine(int vocab) : logits_(size_t(vocab)) { config_.vocab_size = vocab; }
  const ModelConfig& config() const override { return config_; }
  std::string device_name() const override { return "noise"; }
  int context_size() const override { return 4096; }
  int position() const override { return position_; }
  std::span<const float> prefill(std::span<const int32_t> tokens) override {
    position_ += int(tokens.size());
    return fill();
  }
  void prefill_all_logits(std::span<const int32_t>, std::vector<float>&) override { fail("not here"); }
  std::span<const float> decode(int32_t) override {
    ++position_;
    return fill();
  }
  void truncate(int n) override { position_ = n; }
  void fill_cache_with_noise(int n) override { position_ = n; }
  uint64_t kv_bytes_per_token() const override { return 0; }

 private:
  std::span<const float> fill() {
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (float& x : logits_) x = normal(rng_);
    return logits_;
  }
  ModelConfig config_;
  std::vector<float> logits_;
  std::mt19937 rng_{5};
  int position_ = 0;
};

// A request to draw up to 400 tokens from the noise at temperature 1 (seeded), under `constraint`
// (built for the end id `end`), with the toy vocabulary's bytes from `trie`.
inline GenerationRequest noise_request(const std::shared_ptr<const TokenTrie>& trie, int32_t end, uint64_t seed,
                                       const std::function<std::shared_ptr<OutputConstraint>(std::vector<int32_t>)>&
                                           constraint) {
  GenerationRequest req;
  req.prompt = {1, 2, 3};
  req.max_tokens = 400;
  req.sampling.temperature = 1.0f;
  req.sampling.seed = seed;
  req.eos_ids = {end};
  req.token_bytes = [trie](int32_t id) { return trie->bytes(id); };
  req.constraint = constraint(req.eos_ids);
  return req;
}

}  // namespace megaqwen::test

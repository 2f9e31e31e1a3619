// NoiseEngine: a model of random logits, so every draw is a fresh random choice among what a
// constraint's mask leaves. Test-only.
#pragma once

#include <random>
#include <span>
#include <string>
#include <vector>

#include "megaqwen/engine/engine.h"
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

}  // namespace megaqwen::test

#include "megaqwen/model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace megaqwen {

namespace {

// YaRN's correction range: the dims that turn `rotations` times over the original context.
double correction_dim(double rotations, int dim, double base, int original_context) {
  return dim * std::log(original_context / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
}

}  // namespace

std::vector<float> rope_inverse_frequencies(const ModelConfig& c) {
  const int dim = c.rotary_dim, half = dim / 2;
  const RopeScaling& s = c.rope_scaling;
  // theta^(2i/R) in fp32 (transformers: base ** (arange(0, dim, 2).float() / dim)).
  std::vector<float> pos_freqs(static_cast<size_t>(half)), inv(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) pos_freqs[size_t(i)] = std::pow(float(c.rope_theta), float(2 * i) / float(dim));
  switch (s.type) {
    case RopeScaling::Type::None:
      for (int i = 0; i < half; ++i) inv[size_t(i)] = 1.0f / pos_freqs[size_t(i)];
      break;
    case RopeScaling::Type::Linear:
      for (int i = 0; i < half; ++i) inv[size_t(i)] = 1.0f / pos_freqs[size_t(i)] / float(s.factor);
      break;
    case RopeScaling::Type::Yarn: {
      double low = correction_dim(s.beta_fast, dim, c.rope_theta, s.original_max_position_embeddings);
      double high = correction_dim(s.beta_slow, dim, c.rope_theta, s.original_max_position_embeddings);
      if (s.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, double(dim - 1));
      if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
      for (int i = 0; i < half; ++i) {
        const float extrapolated = 1.0f / pos_freqs[size_t(i)];
        const float interpolated = 1.0f / (float(s.factor) * pos_freqs[size_t(i)]);
        const float ramp = std::clamp((float(i) - float(low)) / float(high - low), 0.0f, 1.0f);
        const float keep = 1.0f - ramp;  // the share of the extrapolated (original) frequency
        inv[size_t(i)] = interpolated * (1.0f - keep) + extrapolated * keep;
      }
      break;
    }
  }
  return inv;
}

std::vector<float> fold_rope_amplitude(std::vector<float> qk_norm, const ModelConfig& c) {
  const float amplitude = c.rope_scaling.amplitude();
  if (amplitude == 1.0f) return qk_norm;
  for (size_t i = 0; i < qk_norm.size() && i < size_t(c.rotary_dim); ++i) qk_norm[i] *= amplitude;
  return qk_norm;
}

}  // namespace megaqwen

// RoPE's inverse frequencies for a model: theta^(-2i/R) over its R = rotary_dim rotated dims, then
// stretched by its RopeScaling (linear: divided by the factor; YaRN: low-frequency dims
// interpolated, high-frequency ones kept, a linear ramp between), in fp32 the way transformers'
// modeling_rope_utils computes them, so positions far out rotate alike. Every engine and kernel
// takes its frequencies from here; YaRN's attention_factor goes into the softmax scale
// (ModelConfig::attention_scale).
#pragma once

#include <vector>

#include "megaqwen/model/config.h"

namespace megaqwen {

std::vector<float> rope_inverse_frequencies(const ModelConfig& config);

}  // namespace megaqwen

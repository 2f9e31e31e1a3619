// RoPE's inverse frequencies for a model: theta^(-2i/R) over its R = rotary_dim rotated dims, then
// stretched by its RopeScaling (linear: divided by the factor; YaRN: low-frequency dims
// interpolated, high-frequency ones kept, a linear ramp between), in fp32 the way transformers'
// modeling_rope_utils computes them, so positions far out rotate alike. Every engine and kernel
// takes its frequencies from here. YaRN's attention_factor (RopeScaling::amplitude) multiplies cos
// and sin: the CPU engines pass it to cpu::rope; the CUDA engines fold it into the QK-norm weights
// of the rotated dims (fold_rope_amplitude), which the rotation carries through unchanged.
#pragma once

#include <vector>

#include "megaqwen/model/config.h"

namespace megaqwen {

std::vector<float> rope_inverse_frequencies(const ModelConfig& config);

// A q_norm / k_norm weight vector [head_dim] with its first rotary_dim entries times the RoPE
// amplitude: RoPE is linear in its input, so norming with these and rotating equals rotating with
// cos and sin scaled (the dims RoPE passes through keep their weights). No change without YaRN.
std::vector<float> fold_rope_amplitude(std::vector<float> qk_norm, const ModelConfig& config);

}  // namespace megaqwen

// Prefill matrix products on Intel's AMX tile units (Sapphire Rapids and later Xeons): the input as
// bf16 (split into two bf16 parts, or rounded), the bf16 weights as stored, fp32 sums. Opt-in
// (--amx-prefill): the CPU engine is the fp32 oracle by default, and these sums round differently
// (cpu_amx_matmul.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "megaqwen/model/qwen3_weights.h"
#include "megaqwen/util/thread_pool.h"

namespace megaqwen::cpu {

// Whether this processor has AMX-BF16 and the kernel lets this process use the tile registers (asked
// once, on the first call). `why` says why not.
bool amx_available(std::string* why = nullptr);

// How the fp32 input meets the bf16 weights: rounded to bf16 (the products of matmul_bf16_input,
// one tile product per step), or split into bf16 hi + lo (x - hi, rounded), ~16 significant bits, two
// tile products per step: what the CUDA engines' prefill does by default (split_activations).
enum class AmxInput { kRounded, kSplit };

// out[t, :] = in[t, :] W^T for t < tokens, with W bf16 [rows, cols] and the input as `input` says;
// bf16 x bf16 products are exact in fp32, summed by the tile units (pairs of k in turn, 32 k per
// tile step, denormals flushed). Needs amx_available().
void matmul_amx_bf16(const WeightMatrix& w, const float* in, int64_t tokens, float* out, ThreadPool& pool,
                     AmxInput input = AmxInput::kSplit);

}  // namespace megaqwen::cpu

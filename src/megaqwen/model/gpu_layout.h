// The GPU engines' weight layout, built on the host: what CudaWeights uploads (cuda_weights.h) and
// what the megakernel's host emulator test feeds the kernel (tests/simt). Plain C++, no CUDA.
//
// Linear weights become bf16 (bf16 checkpoints are copied; f16 / f32 ones rounded to nearest even),
// norm weights fp32. Two rearrangements, both exact:
//   qkv      [Q + 2KV, H]: q_proj, k_proj, v_proj rows stacked, so one GEMV/GEMM makes q | k | v;
//   gate_up  [2I, H]:      gate_proj row i at row 2i, up_proj row i at row 2i + 1, so SwiGLU pairs
//                          are adjacent (the GEMV epilogue, the prefill SwiGLU kernel, the megakernel's
//                          stage D rely on it).
#pragma once

#include <cstdint>
#include <vector>

#include "megaqwen/model/qwen3_weights.h"

namespace megaqwen {

std::vector<uint16_t> matrix_bf16(const WeightMatrix& w);            // [rows, cols]
std::vector<float> vector_f32(const WeightVector& w);                // [size]
std::vector<uint16_t> stacked_qkv_bf16(const Qwen3LayerWeights& l);  // [Q + 2KV, H]
std::vector<uint16_t> interleaved_gate_up_bf16(const Qwen3LayerWeights& l);  // [2I, H]

}  // namespace megaqwen

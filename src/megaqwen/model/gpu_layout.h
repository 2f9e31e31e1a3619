// The GPU engines' weight layout, built on the host: what CudaWeights uploads (cuda_weights.h) and
// what the megakernel's host emulator test feeds the kernel (tests/simt). Plain C++, no CUDA.
//
// Linear weights become bf16 (bf16 checkpoints are copied; f16 / f32 ones rounded to nearest even),
// norm weights fp32. The rearrangements, all exact:
//   qkv      [Q + 2KV, H]: q_proj, k_proj, v_proj rows stacked, so one GEMV/GEMM makes q | k | v;
//   gate_up  [2I, H]:      gate_proj row i at row 2i, up_proj row i at row 2i + 1, so SwiGLU pairs
//                          are adjacent (the GEMV epilogue, the prefill SwiGLU kernel, the megakernel's
//                          stage D rely on it);
//   Qwen3.5 gated attention [2Q + 2KV, H]: q_proj's per-head (query D | gate D) rows split into all
//                          queries, then all gates, then k_proj, v_proj: q | gate | k | v;
//   Qwen3.5 DeltaNet in_proj [C + Vd + 2nv, H]: in_proj_qkv | in_proj_z | in_proj_b | in_proj_a;
//   down^T   [I, H]:       the one-stage MLP's down, transposed (the megakernel runner makes it on the
//                          device; transposed_bf16 is the host's, for the emulator's tests).
// Qwen3.5's RMSNorm weights scale by 1 + w: zero_centered_norm_f32 folds the 1 in (exact in fp32).
#pragma once

#include <cstdint>
#include <vector>

#include "megaqwen/model/qwen35_weights.h"
#include "megaqwen/model/qwen3_weights.h"

namespace megaqwen {

std::vector<uint16_t> matrix_bf16(const WeightMatrix& w);            // [rows, cols]
std::vector<float> vector_f32(const WeightVector& w);                // [size]
std::vector<float> zero_centered_norm_f32(const WeightVector& w);    // [size]: 1 + w
std::vector<uint16_t> stacked_qkv_bf16(const Qwen3LayerWeights& l);  // [Q + 2KV, H]
std::vector<uint16_t> interleaved_gate_up_bf16(const Qwen3LayerWeights& l);  // [2I, H]
std::vector<uint16_t> interleaved_rows_bf16(const WeightMatrix& even, const WeightMatrix& odd);  // [2 rows, cols]
// m [rows, cols] row-major -> [cols, rows]; Error if m.size() != rows * cols.
std::vector<uint16_t> transposed_bf16(const std::vector<uint16_t>& m, size_t rows, size_t cols);

// Rows [row0, row0 + rows) of a matrix: one piece of a stacked matrix.
struct RowRange {
  const WeightMatrix* matrix;
  int64_t row0, rows;
};
std::vector<uint16_t> stacked_rows_bf16(const std::vector<RowRange>& pieces);  // pieces' rows in order
std::vector<uint16_t> gated_attention_qgkv_bf16(const Qwen35FullAttentionWeights& w, int heads, int head_dim);
std::vector<uint16_t> delta_net_in_proj_bf16(const Qwen35LinearAttentionWeights& w);

}  // namespace megaqwen

// The register-blocked micro-kernel behind cpu::matmul (cpu_matmul.cpp), open to other fp32
// products (prefill attention, cpu_attention.cpp). One operand is a packed panel of 32 columns,
// laid out [k][32]; the other is read in place, row by row.
#pragma once

#include <cstdint>

namespace megaqwen::cpu {

inline constexpr int64_t kPanelWidth = 32;

// c[t * 32 + j] = sum_{k < K} in[t * in_stride + k] * panel[k * 32 + j] for t < tokens, j < 32, with
// the SIMD level in effect (cpu_simd.h). Each element is summed in the same order whatever `tokens`
// is and whichever other rows share its tile, in partial sums of 256 values of k.
void panel_product(const float* panel, int64_t K, const float* in, int64_t in_stride, int64_t tokens, float* c);

}  // namespace megaqwen::cpu

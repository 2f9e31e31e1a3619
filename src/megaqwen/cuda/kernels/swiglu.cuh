// SwiGLU for prefill: act[t, i] = silu(gu[t, 2i]) * gu[t, 2i + 1], written as the bf16 split for the
// down-projection GEMM. In: gu [T, 2I] fp32, the output of one GEMM over gate/up rows interleaved at
// upload (row 2i = gate_proj row i, row 2i + 1 = up_proj row i), so each pair is adjacent and the
// kernel reads one float2 per output. Out: hi, lo [T, I] bf16 (lo may be null).
// silu(g) = g / (1 + exp(-g)) with the accurate expf, as cpu::silu.
#pragma once

#include "megaqwen/cuda/kernels/common.cuh"

namespace megaqwen::cuda {

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

__global__ void swiglu_split_kernel(const float2* __restrict__ gu, size_t n, bf16* __restrict__ hi, bf16* __restrict__ lo) {
  pdl_begin();
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float2 p = gu[i];
    const float y = silu(p.x) * p.y;
    const bf16 h = __float2bfloat16_rn(y);
    hi[i] = h;
    if (lo) lo[i] = __float2bfloat16_rn(y - __bfloat162float(h));
  }
}

}  // namespace megaqwen::cuda

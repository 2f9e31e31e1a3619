// RMSNorm over rows: out[r, i] = w[i] * (x[r, i] * 1/sqrt(mean_i(x[r, i]^2) + eps)).
// In: x [rows, n] fp32 (the residual stream), w [n] fp32 (converted once at upload). Out: fp32, or the
// two-term bf16 split (hi = bf16(y), lo = bf16(y - hi)) that the prefill GEMMs read.
// One block per row: rows are short (n = 1024..4096), so one block streams a row once, keeps it in
// registers, reduces the sum of squares with warp shuffles and writes the normalized row. The
// arithmetic order matches cpu::rms_norm (scale first, then the weight); the sum is fp32 here, fp64 on
// the CPU, a difference of ~1e-7 relative.
#pragma once

#include "megaqwen/cuda/kernels/common.cuh"

namespace megaqwen::cuda {

constexpr int kNormThreads = 256;
constexpr int kNormMaxPerThread = 16;  // n <= 4096

enum class NormOut { F32, Split };

template <NormOut kOut>
__global__ __launch_bounds__(kNormThreads) void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                               int n, float eps, float* __restrict__ out,
                                                               bf16* __restrict__ hi, bf16* __restrict__ lo) {
  pdl_begin();
  __shared__ float scratch[32];
  const size_t row = blockIdx.x;
  const float* xr = x + row * size_t(n);
  float v[kNormMaxPerThread];
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kNormMaxPerThread; ++j) {
    const int i = int(threadIdx.x) + j * kNormThreads;
    v[j] = i < n ? xr[i] : 0.0f;
    ss += v[j] * v[j];
  }
  ss = block_sum(ss, scratch);
  const float scale = 1.0f / sqrtf(ss / float(n) + eps);
#pragma unroll
  for (int j = 0; j < kNormMaxPerThread; ++j) {
    const int i = int(threadIdx.x) + j * kNormThreads;
    if (i >= n) break;
    const float y = w[i] * (v[j] * scale);
    if constexpr (kOut == NormOut::F32) {
      out[row * size_t(n) + size_t(i)] = y;
    } else {
      const bf16 h = __float2bfloat16_rn(y);
      hi[row * size_t(n) + size_t(i)] = h;
      if (lo) lo[row * size_t(n) + size_t(i)] = __float2bfloat16_rn(y - __bfloat162float(h));
    }
  }
}

}  // namespace megaqwen::cuda

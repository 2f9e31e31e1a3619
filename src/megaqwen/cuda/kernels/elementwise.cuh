// Small elementwise kernels: embedding lookup, the bf16 split of fp32 activations, deterministic
// noise for benchmark caches, token counting for the sampling penalties, Qwen3.5's attention output
// gate. Each thread handles one
// element (or one 8-element group for the embedding); all are memory-bound and tiny next to the GEMMs.
#pragma once

#include "megaqwen/cuda/kernels/common.cuh"

namespace megaqwen::cuda {

// x[t, :] = fp32(table[tokens[t], :]). One block per token, 8 bf16 (16 bytes) per thread step.
__global__ void embed_rows_kernel(const bf16* __restrict__ table, int hidden, const int32_t* __restrict__ tokens,
                                  float* __restrict__ x) {
  pdl_begin();
  const int t = blockIdx.x;
  const uint4* row = reinterpret_cast<const uint4*>(table + size_t(tokens[t]) * size_t(hidden));
  float* out = x + size_t(t) * size_t(hidden);
  for (int i = threadIdx.x; i < hidden / 8; i += blockDim.x) {
    float f[8];
    unpack_bf16x8(__ldg(row + i), f);
#pragma unroll
    for (int j = 0; j < 8; ++j) out[8 * i + j] = f[j];
  }
}

__global__ void split_bf16_kernel(const float* __restrict__ x, size_t n, bf16* __restrict__ hi, bf16* __restrict__ lo) {
  pdl_begin();
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const bf16 h = __float2bfloat16_rn(v);
    hi[i] = h;
    if (lo) lo[i] = __float2bfloat16_rn(v - __bfloat162float(h));
  }
}

__global__ void fill_noise_kernel(bf16* __restrict__ dst, size_t n, uint32_t seed) {
  pdl_begin();
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float u = float(uniform_at(seed, 0, uint32_t(i)) * 2.0 - 1.0);
    dst[i] = __float2bfloat16_rn(u);
  }
}

__global__ void fill_noise_f32_kernel(float* __restrict__ dst, size_t n, float scale, uint32_t seed) {
  pdl_begin();
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = scale * float(uniform_at(seed, 0, uint32_t(i)) * 2.0 - 1.0);
}

__global__ void count_tokens_kernel(const int32_t* __restrict__ ids, int n, int32_t* __restrict__ counts) {
  pdl_begin();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(counts + ids[i], 1);
}

// x[r, i] *= sigmoid(gate[r * gate_stride + i]) for r < rows, i < n: the gate rows sit inside the
// q | gate | k | v projection rows, so they are read in place.
__global__ void sigmoid_gate_kernel(float* __restrict__ x, const float* __restrict__ gate, int rows, int n,
                                    int gate_stride) {
  pdl_begin();
  const size_t total = size_t(rows) * size_t(n);
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / size_t(n), c = i % size_t(n);
    x[i] *= 1.0f / (1.0f + expf(-gate[r * size_t(gate_stride) + c]));
  }
}

}  // namespace megaqwen::cuda

// Decode attention, split over the KV length (flash-decoding), then merged with log-sum-exp.
// In: q [heads, D] fp32 (after QK-norm and RoPE), one layer's k/v cache bf16 [context, kv_heads, D],
// n = *pos_ptr + 1 cached positions (the new token's k/v already appended). Out: o [heads, D] fp32.
//
// Why this shape: at long context the cache is the larger stream (114,688 bytes per position for
// Qwen3-0.6B, all layers), and one block per kv head would use 8 of 132 SMs. Block (kv head, split)
// reads its chunk of the cache once for all G = heads/kv_heads query heads of the group (GQA), so the
// cache is read once per token. Inside a block, each half-warp walks positions (16 lanes x 16 bytes =
// one 128-dim bf16 row; 32 bytes a lane for Qwen3.5's 256), 8 half-warps in parallel, each keeping an online softmax (running max m,
// sum l, unnormalized output o) in the log2 domain (q pre-scaled by log2(e)/sqrt(D), exp2f). The 8
// streams merge through shared memory into one partial (m, l, o) per (head, split); a second kernel
// merges the splits: o = sum_s o_s 2^(m_s - M) / sum_s l_s 2^(m_s - M), M = max_s m_s.
// The chunk length is ceil(n / splits) rounded up to 8, so the grid is fixed for a captured graph and
// blocks past the end write an empty partial (m = -inf, l = 0).
#pragma once

#include "megaqwen/cuda/kernels/common.cuh"

namespace megaqwen::cuda {

constexpr int kDecodeAttnThreads = 128;
constexpr int kDecodeAttnStreams = kDecodeAttnThreads / 16;

template <int D>
struct KvRow;  // the 32-byte (D = 256), 16-byte (D = 128) or 8-byte (D = 64) slice of a cache row one lane loads
template <>
struct KvRow<256> {
  static constexpr int P = 16;
  __device__ static void load(const bf16* p, float f[16]) {
    const uint4* q = reinterpret_cast<const uint4*>(p);
    unpack_bf16x8(__ldg(q), f);
    unpack_bf16x8(__ldg(q + 1), f + 8);
  }
};
template <>
struct KvRow<128> {
  static constexpr int P = 8;
  __device__ static void load(const bf16* p, float f[8]) { unpack_bf16x8(__ldg(reinterpret_cast<const uint4*>(p)), f); }
};
template <>
struct KvRow<64> {
  static constexpr int P = 4;
  __device__ static void load(const bf16* p, float f[4]) { unpack_bf16x4(__ldg(reinterpret_cast<const uint2*>(p)), f); }
};

template <int D, int G>
__global__ __launch_bounds__(kDecodeAttnThreads) void attention_decode_kernel(
    const float* __restrict__ q, const bf16* __restrict__ k_cache, const bf16* __restrict__ v_cache,
    const int32_t* __restrict__ pos_ptr, int kv_heads, int splits, float scale_log2, float* __restrict__ partial_o,
    float* __restrict__ partial_ml) {
  pdl_begin();
  constexpr int P = KvRow<D>::P;  // dims per lane
  constexpr int S = kDecodeAttnStreams;
  __shared__ float sm_m[S][G], sm_l[S][G];
  __shared__ float sm_o[S][G][D];
  static_assert(sizeof(sm_o) <= 32768, "the streams' partial outputs must fit the static shared memory");

  const int kvh = blockIdx.x, split = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, half = lane >> 4, sub = lane & 15;
  const int stream = warp * 2 + half;
  const int n = *pos_ptr + 1;
  const int chunk = (div_up(n, splits) + 7) & ~7;
  const int begin = split * chunk, end = min(n, begin + chunk);

  float qr[G][P], m[G], l[G], o[G][P];
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int j = 0; j < P; ++j) {
      qr[g][j] = q[(kvh * G + g) * D + sub * P + j] * scale_log2;
      o[g][j] = 0.0f;
    }
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }

  // Both halves of a warp run the same iterations (the shuffles need the whole warp).
  for (int base = begin + warp * 2; base < end; base += S) {
    const int p = base + half;
    const bool valid = p < end;
    float kf[P], vf[P];
    if (valid) {
      const size_t at = (size_t(p) * kv_heads + kvh) * D + sub * P;
      KvRow<D>::load(k_cache + at, kf);
      KvRow<D>::load(v_cache + at, vf);
    } else {
#pragma unroll
      for (int j = 0; j < P; ++j) kf[j] = vf[j] = 0.0f;
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < P; ++j) s = fmaf(qr[g][j], kf[j], s);
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) s += __shfl_xor_sync(kFullMask, s, off);  // within the half-warp
      if (valid) {
        const float mn = fmaxf(m[g], s);
        const float corr = exp2f(m[g] - mn);  // 0 when m was -inf
        const float e = exp2f(s - mn);
        l[g] = l[g] * corr + e;
#pragma unroll
        for (int j = 0; j < P; ++j) o[g][j] = fmaf(e, vf[j], o[g][j] * corr);
        m[g] = mn;
      }
    }
  }

#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int j = 0; j < P; ++j) sm_o[stream][g][sub * P + j] = o[g][j];
    if (sub == 0) {
      sm_m[stream][g] = m[g];
      sm_l[stream][g] = l[g];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * D; idx += kDecodeAttnThreads) {
    const int g = idx / D, d = idx % D;
    float M = -INFINITY;
#pragma unroll
    for (int s = 0; s < S; ++s) M = fmaxf(M, sm_m[s][g]);
    float L = 0.0f, O = 0.0f;
    if (M != -INFINITY) {
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const float w = exp2f(sm_m[s][g] - M);
        L = fmaf(sm_l[s][g], w, L);
        O = fmaf(sm_o[s][g][d], w, O);
      }
    }
    const size_t slot = size_t(kvh * G + g) * splits + split;
    partial_o[slot * D + d] = O;
    if (d == 0) {
      partial_ml[2 * slot] = M;
      partial_ml[2 * slot + 1] = L;
    }
  }
}

// One block of D threads per query head: merges the splits' partials.
template <int D>
__global__ __launch_bounds__(D) void attention_decode_merge_kernel(const float* __restrict__ partial_o,
                                                                   const float* __restrict__ partial_ml, int splits,
                                                                   float* __restrict__ out) {
  pdl_begin();
  const int h = blockIdx.x, d = threadIdx.x;
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, partial_ml[2 * (size_t(h) * splits + s)]);
  float L = 0.0f, O = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const size_t slot = size_t(h) * splits + s;
    const float ms = partial_ml[2 * slot];
    if (ms == -INFINITY) continue;
    const float w = exp2f(ms - M);
    L = fmaf(partial_ml[2 * slot + 1], w, L);
    O = fmaf(partial_o[slot * D + d], w, O);
  }
  out[size_t(h) * D + d] = O / L;
}

}  // namespace megaqwen::cuda

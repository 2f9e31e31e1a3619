// Causal attention over a prompt chunk, flash-attention style (tiled, online softmax, no T x T
// scores in memory). In: q [T, heads, D] fp32 for the chunk's tokens at positions p0..p0+T-1, one
// layer's k/v cache bf16 [context, kv_heads, D] already holding positions 0..p0+T-1 (earlier chunks
// and this one). Out: o [T, heads, D] fp32.
//
// Block (query tile of kBQ tokens, head h) walks key tiles of kBK positions up to its last query's
// position. Per tile: K (transposed) and V are converted to fp32 in shared memory, S = Q K^T is a
// 64x64 tile computed as 4x4 register blocks per thread (thread (ty, tx) owns rows 4ty..4ty+3 and
// columns tx + 16c), the causal mask and the online softmax update run on those registers (a row's
// 16 owners are one half-warp, so row max/sum are 4 shuffles), P goes to shared memory and O += P V
// accumulates in registers (the same 4 rows, columns tx + 16c). Scores are in the log2 domain (q
// pre-scaled by log2(e)/sqrt(D)).
//
// This is fp32 CUDA-core arithmetic: exact enough to match the fp32 CPU reference tightly, but not
// the tensor-core (wgmma / mma.sync) kernel a long-prompt prefill ultimately wants; see docs/CUDA.md.
// Continuing after an existing cache is the p0 offset; long prompts are split into chunks by the engine.
#pragma once

#include "megaqwen/cuda/kernels/common.cuh"

namespace megaqwen::cuda {

constexpr int kPrefillBQ = 64, kPrefillBK = 64, kPrefillThreads = 256;

// Shared-memory layout (floats): 66 KB at D = 64, 110 KB at 128, 210 KB at Qwen3.5's 256 (Hopper and
// Ampere data-center parts allow up to 227 / 163 KB per block; the engine checks). Row strides are padded by 4 so the two row groups a warp reads
// (ty and ty + 1, 4 rows apart) fall in different banks.
template <int D>
struct PrefillSmem {
  static constexpr int kQStride = D + 4, kPStride = kPrefillBK + 4;
  static constexpr int kQ = 0;                                 // [BQ][D + 4]
  static constexpr int kKt = kQ + kPrefillBQ * kQStride;       // [D][BK]
  static constexpr int kV = kKt + D * kPrefillBK;              // [BK][D]
  static constexpr int kP = kV + kPrefillBK * D;               // [BQ][BK + 4]
  static constexpr int kFloats = kP + kPrefillBQ * kPStride;
  static constexpr size_t kBytes = size_t(kFloats) * sizeof(float);
};

template <int D>
__global__ __launch_bounds__(kPrefillThreads) void attention_prefill_kernel(
    const float* __restrict__ q, const bf16* __restrict__ k_cache, const bf16* __restrict__ v_cache, int T, int p0,
    int heads, int kv_heads, float scale_log2, float* __restrict__ out) {
  pdl_begin();
  static_assert(kPrefillThreads == 256 && kPrefillBQ == 64 && kPrefillBK == 64, "thread mapping assumes 16x16 threads");
  using L = PrefillSmem<D>;
  constexpr int DC = D / 16;  // output columns per thread
  constexpr int D8 = D / 8;   // 16-byte groups per cache row
  MEGAQWEN_EXTERN_SHARED(float, smem);
  float* Qs = smem + L::kQ;
  float* Kt = smem + L::kKt;
  float* Vs = smem + L::kV;
  float* Ps = smem + L::kP;

  const int h = blockIdx.y, kvh = h / (heads / kv_heads);
  const int t0 = blockIdx.x * kPrefillBQ;
  const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;

  for (int i = tid; i < kPrefillBQ * D; i += kPrefillThreads) {
    const int r = i / D, d = i % D, t = t0 + r;
    Qs[r * L::kQStride + d] = t < T ? q[(size_t(t) * heads + h) * D + d] * scale_log2 : 0.0f;
  }

  float m[4], l[4], o[4][DC];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < DC; ++c) o[r][c] = 0.0f;
  }

  const int t_last = min(t0 + kPrefillBQ, T) - 1;
  const int kv_end = p0 + t_last + 1;  // keys 0..kv_end-1 are visible to some query of this block
  for (int j0 = 0; j0 < kv_end; j0 += kPrefillBK) {
    __syncthreads();  // Q is loaded; the previous tile's readers are done
    for (int i = tid; i < kPrefillBK * D8; i += kPrefillThreads) {
      {  // K, transposed: consecutive threads take consecutive positions (conflict-free stores)
        const int j = i % kPrefillBK, dc = i / kPrefillBK, p = j0 + j;
        float f[8] = {};
        if (p < kv_end) unpack_bf16x8(__ldg(reinterpret_cast<const uint4*>(k_cache + (size_t(p) * kv_heads + kvh) * D + dc * 8)), f);
#pragma unroll
        for (int e = 0; e < 8; ++e) Kt[(dc * 8 + e) * kPrefillBK + j] = f[e];
      }
      {  // V, row-major: consecutive threads take consecutive 16-byte groups of a row (coalesced)
        const int j = i / D8, dc = i % D8, p = j0 + j;
        float f[8] = {};
        if (p < kv_end) unpack_bf16x8(__ldg(reinterpret_cast<const uint4*>(v_cache + (size_t(p) * kv_heads + kvh) * D + dc * 8)), f);
        float4* dst = reinterpret_cast<float4*>(Vs + j * D + dc * 8);
        dst[0] = make_float4(f[0], f[1], f[2], f[3]);
        dst[1] = make_float4(f[4], f[5], f[6], f[7]);
      }
    }
    __syncthreads();

    float s[4][4] = {};
#pragma unroll 8
    for (int d = 0; d < D; ++d) {
      float a[4], b[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) a[r] = Qs[(ty * 4 + r) * L::kQStride + d];
#pragma unroll
      for (int c = 0; c < 4; ++c) b[c] = Kt[d * kPrefillBK + tx + 16 * c];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[r][c] = fmaf(a[r], b[c], s[r][c]);
    }

#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int qpos = p0 + t0 + ty * 4 + r;
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if (j0 + tx + 16 * c > qpos) s[r][c] = -INFINITY;
        mx = fmaxf(mx, s[r][c]);
      }
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, off));
      const float mn = fmaxf(m[r], mx);
      const bool empty = mn == -INFINITY;  // nothing visible yet (only for padding rows)
      const float corr = empty ? 1.0f : exp2f(m[r] - mn);
      float rs = 0.0f;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float pv = empty ? 0.0f : exp2f(s[r][c] - mn);
        Ps[(ty * 4 + r) * L::kPStride + tx + 16 * c] = pv;
        rs += pv;
      }
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) rs += __shfl_xor_sync(kFullMask, rs, off);
      l[r] = l[r] * corr + rs;
      m[r] = mn;
#pragma unroll
      for (int c = 0; c < DC; ++c) o[r][c] *= corr;
    }
    __syncthreads();

#pragma unroll 4
    for (int j = 0; j < kPrefillBK; ++j) {
      float vb[DC];
#pragma unroll
      for (int c = 0; c < DC; ++c) vb[c] = Vs[j * D + tx + 16 * c];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float pv = Ps[(ty * 4 + r) * L::kPStride + j];
#pragma unroll
        for (int c = 0; c < DC; ++c) o[r][c] = fmaf(pv, vb[c], o[r][c]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int t = t0 + ty * 4 + r;
    if (t >= T) continue;
    const float inv = 1.0f / l[r];
#pragma unroll
    for (int c = 0; c < DC; ++c) out[(size_t(t) * heads + h) * D + tx + 16 * c] = o[r][c] * inv;
  }
}

}  // namespace megaqwen::cuda

// QK-norm, RoPE and the KV-cache append, fused: one warp per (token, head).
// In: qkv [T, Q + 2KV] fp32 (the q | k | v projections of each token), q_norm / k_norm [D] fp32,
// inv_freq [D/2] fp32 (theta^(-2i/D), computed on the host exactly as cpu::rope_inv_freq).
// Out: q [T, heads, D] fp32; k_cache / v_cache rows of the tokens' positions, bf16 [context, kv_heads, D].
// Warp w of block (t, h) handles query head h (h < heads) or kv head h - heads. Lane l owns elements
// l + 32e (e < D/32), so the rotate-half pairs (i, i + D/2) land in the same lane (e, e + D/64) and RoPE
// needs no shuffle; the head's sum of squares is one warp reduction. The angle is fp32
// position * inv_freq[i] and sincosf is the accurate one, as in cpu::rope (long positions depend on it).
// The position of token t is *pos_ptr + t in decode (a device value, so a captured graph is reused)
// and pos_base + t in prefill.
#pragma once

#include "megaqwen/cuda/kernels/common.cuh"

namespace megaqwen::cuda {

template <int D>
__global__ __launch_bounds__(32) void qk_norm_rope_kernel(const float* __restrict__ qkv, int heads, int kv_heads,
                                                          const float* __restrict__ q_norm, const float* __restrict__ k_norm,
                                                          const float* __restrict__ inv_freq, const int32_t* pos_ptr,
                                                          int pos_base, float eps, float* __restrict__ q_out,
                                                          bf16* __restrict__ k_cache, bf16* __restrict__ v_cache) {
  static_assert(D % 64 == 0, "rotate-half pairs must fall in the same lane");
  constexpr int E = D / 32;
  const int t = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
  const int Q = heads * D, KV = kv_heads * D;
  const int pos = (pos_ptr ? *pos_ptr : pos_base) + t;
  const float* row = qkv + size_t(t) * size_t(Q + 2 * KV);
  const bool is_q = h < heads;
  const int kvh = h - heads;
  const float* src = is_q ? row + h * D : row + Q + kvh * D;
  const float* w = is_q ? q_norm : k_norm;

  float v[E];
  float ss = 0.0f;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    v[e] = src[lane + 32 * e];
    ss += v[e] * v[e];
  }
  ss = warp_sum(ss);
  const float scale = 1.0f / sqrtf(ss / float(D) + eps);
#pragma unroll
  for (int e = 0; e < E; ++e) v[e] = w[lane + 32 * e] * (v[e] * scale);
#pragma unroll
  for (int e = 0; e < E / 2; ++e) {
    const int i = lane + 32 * e;  // < D/2
    const float angle = float(pos) * inv_freq[i];
    float s, c;
    sincosf(angle, &s, &c);
    const float a = v[e], b = v[e + E / 2];
    v[e] = a * c - b * s;
    v[e + E / 2] = b * c + a * s;
  }
  if (is_q) {
    float* out = q_out + (size_t(t) * heads + h) * D;
#pragma unroll
    for (int e = 0; e < E; ++e) out[lane + 32 * e] = v[e];
  } else {
    const size_t at = (size_t(pos) * kv_heads + kvh) * D;
    const float* vsrc = row + Q + KV + kvh * D;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      k_cache[at + lane + 32 * e] = __float2bfloat16_rn(v[e]);
      v_cache[at + lane + 32 * e] = __float2bfloat16_rn(vsrc[lane + 32 * e]);
    }
  }
}

}  // namespace megaqwen::cuda

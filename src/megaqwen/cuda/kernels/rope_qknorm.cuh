// QK-norm, RoPE and the KV-cache append, fused: one warp per (token, head).
// In: qkv rows of the q | k | v projections of each token (Qwen3), or q | gate | k | v (Qwen3.5's
// gated attention: `gated`, the gate is read later by the output gate), q_norm / k_norm [D] fp32
// (Qwen3.5's 1 + w, and YaRN's attention factor on the rotated dims, folded in at upload), inv_freq
// [R/2] fp32 (model/rope.h's rope_inverse_frequencies, the CPU engine's table) for the rotary dims
// R = rotary_dim <= D.
// Out: q [T, heads, D] fp32; k_cache / v_cache rows of the tokens' positions, bf16 [context, kv_heads, D].
// Warp w of block (t, h) handles query head h (h < heads) or kv head h - heads. Lane l owns elements
// l + 32e (e < D/32), so the head's sum of squares is one warp reduction. RoPE rotates the pairs
// (i, i + R/2) of the first R dims (dims R..D pass through, Qwen3.5's partial rotary); the normed head
// goes through the warp's shared row so any R pairs its elements whatever lane holds the partner.
// The angle is fp32 position * inv_freq[i] and sincosf is the accurate one, as in cpu::rope (long
// positions depend on it). The position of token t is *pos_ptr + t in decode (a device value, so a
// captured graph is reused) and pos_base + t in prefill.
#pragma once

#include "megaqwen/cuda/kernels/common.cuh"

namespace megaqwen::cuda {

template <int D>
__global__ __launch_bounds__(32) void qk_norm_rope_kernel(const float* __restrict__ qkv, int heads, int kv_heads,
                                                          bool gated, int rotary_dim, const float* __restrict__ q_norm,
                                                          const float* __restrict__ k_norm,
                                                          const float* __restrict__ inv_freq, const int32_t* pos_ptr,
                                                          int pos_base, float eps, float* __restrict__ q_out,
                                                          bf16* __restrict__ k_cache, bf16* __restrict__ v_cache) {
  pdl_begin();
  static_assert(D % 32 == 0, "a head is whole lanes' elements");
  constexpr int E = D / 32;
  __shared__ float normed[D];
  const int t = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
  const int Q = heads * D, KV = kv_heads * D;
  const int k_offset = gated ? 2 * Q : Q;  // q | gate | k | v or q | k | v
  const int pos = (pos_ptr ? *pos_ptr : pos_base) + t;
  const float* row = qkv + size_t(t) * size_t(k_offset + 2 * KV);
  const bool is_q = h < heads;
  const int kvh = h - heads;
  const float* src = is_q ? row + h * D : row + k_offset + kvh * D;
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
  for (int e = 0; e < E; ++e) {
    v[e] = w[lane + 32 * e] * (v[e] * scale);
    normed[lane + 32 * e] = v[e];
  }
  __syncwarp();
  const int half = rotary_dim / 2;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int i = lane + 32 * e;
    if (i >= rotary_dim) continue;
    const int f = i < half ? i : i - half;  // the pair (f, f + half) and its frequency
    float s, c;
    sincosf(float(pos) * inv_freq[f], &s, &c);
    const float a = normed[f], b = normed[f + half];
    v[e] = i < half ? a * c - b * s : b * c + a * s;
  }
  if (is_q) {
    float* out = q_out + (size_t(t) * heads + h) * D;
#pragma unroll
    for (int e = 0; e < E; ++e) out[lane + 32 * e] = v[e];
  } else {
    const size_t at = (size_t(pos) * kv_heads + kvh) * D;
    const float* vsrc = row + k_offset + KV + kvh * D;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      k_cache[at + lane + 32 * e] = __float2bfloat16_rn(v[e]);
      v_cache[at + lane + 32 * e] = __float2bfloat16_rn(vsrc[lane + 32 * e]);
    }
  }
}

}  // namespace megaqwen::cuda

// The Gated DeltaNet's time mixing (Qwen3.5's linear-attention layers) on the GPU: the steps of
// src/megaqwen/engine/cpu_gated_delta_net.h, for a chunk of T tokens (T = 1 in decode).
//
//   causal_conv_kernel     depthwise conv over the last K inputs of each channel, then SiLU; one thread
//                          per channel walks the chunk in time order with the K-1 remembered inputs in
//                          registers, and leaves the last K-1 in the conv state.
//   delta_rule_kernel      q and k l2-normalized, beta and g, then the gated delta rule. Given one
//                          token's q, k, beta and g, every column j of a head's state S[:, j] evolves on
//                          its own (m_j, the write d_j and o_j read only column j), so a lane owns a
//                          column: one warp per (value head, 32 value columns), the column in registers
//                          for the whole chunk (read once, written once), and no reduction but the two
//                          l2 norms, which each warp computes for itself.
//   gated_rms_norm_kernel  o * rsqrt(mean(o^2) + eps) * w * silu(z) per (token, value head).
//
// Layouts as on the CPU: qkv [T, C] fp32 with C = q [nk, dk] | k [nk, dk] | v [nv, dv]; b, a [T, nv];
// states [nv, dk, dv]; conv state [K-1, C] oldest first; o, z [T, nv, dv]. Arithmetic follows the CPU
// steps in order (the decay before the recall, fused multiply-adds in the same order); the norms sum
// in fp32 here and fp64 there.
#pragma once

#include "megaqwen/cuda/kernels.h"  // kConvMaxTaps
#include "megaqwen/cuda/kernels/common.cuh"

namespace megaqwen::cuda {

template <int kMaxTaps>
__global__ void causal_conv_kernel(float* __restrict__ qkv, const bf16* __restrict__ w, float* __restrict__ state,
                                   int T, int C, int K) {
  pdl_begin();
  const int ch = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (ch >= C) return;
  float taps[kMaxTaps], past[kMaxTaps];  // past[0..K-2]: the last K-1 inputs, oldest first
#pragma unroll
  for (int j = 0; j < kMaxTaps; ++j) {
    taps[j] = j < K ? __bfloat162float(w[size_t(ch) * size_t(K) + size_t(j)]) : 0.0f;
    past[j] = j < K - 1 ? state[size_t(j) * size_t(C) + size_t(ch)] : 0.0f;
  }
  for (int t = 0; t < T; ++t) {
    float* x = qkv + size_t(t) * size_t(C) + size_t(ch);
    const float in = *x;
    // The window oldest first: past[0..K-2], then this input (indices fixed at compile time, so the
    // arrays stay in registers).
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxTaps; ++j)
      if (j < K) acc = fmaf(taps[j], j < K - 1 ? past[j] : in, acc);
#pragma unroll
    for (int j = 0; j < kMaxTaps - 1; ++j) {
      if (j < K - 2) past[j] = past[j + 1];
      else if (j == K - 2) past[j] = in;
    }
    *x = acc / (1.0f + expf(-acc));  // SiLU
  }
#pragma unroll
  for (int j = 0; j < kMaxTaps - 1; ++j)
    if (j < K - 1) state[size_t(j) * size_t(C) + size_t(ch)] = past[j];
}

struct DeltaRuleParams {
  const float* qkv;      // [T, C] after the conv
  const float* b;        // [T, nv]
  const float* a;        // [T, nv]
  const float* A_log;    // [nv]
  const float* dt_bias;  // [nv]
  float* states;         // [nv, dk, dv]
  float* o;              // [T, nv, dv]
  int T, nk, nv, dk, dv;
  float l2_eps;
};

__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Grid (nv, ceil(dv / 32)), 32 threads; dk <= kMaxDk.
template <int kMaxDk>
__global__ __launch_bounds__(32) void delta_rule_kernel(const DeltaRuleParams p) {
  pdl_begin();
  __shared__ float qs[kMaxDk], ks[kMaxDk];  // this token's normalized q (scaled) and k
  const int lane = int(threadIdx.x), hv = int(blockIdx.x), j = int(blockIdx.y) * 32 + lane;
  const int hk = hv / (p.nv / p.nk), Kd = p.nk * p.dk, C = 2 * Kd + p.nv * p.dv;
  const bool column = j < p.dv;
  float* S_head = p.states + size_t(hv) * size_t(p.dk) * size_t(p.dv);
  float S[kMaxDk];  // S[i][j] of this lane's column
#pragma unroll
  for (int i = 0; i < kMaxDk; ++i) S[i] = column && i < p.dk ? S_head[size_t(i) * size_t(p.dv) + size_t(j)] : 0.0f;
  const float q_scale = 1.0f / sqrtf(float(p.dk));
  const float decay_rate = expf(p.A_log[hv]), dt_bias = p.dt_bias[hv];

  for (int t = 0; t < p.T; ++t) {
    const float* row = p.qkv + size_t(t) * size_t(C);
    float sq = 0.0f, sk = 0.0f;
    for (int i = lane; i < p.dk; i += 32) {
      const float q = row[hk * p.dk + i], k = row[Kd + hk * p.dk + i];
      qs[i] = q;
      ks[i] = k;
      sq += q * q;
      sk += k * k;
    }
    const float rq = 1.0f / sqrtf(warp_sum(sq) + p.l2_eps), rk = 1.0f / sqrtf(warp_sum(sk) + p.l2_eps);
    for (int i = lane; i < p.dk; i += 32) {
      qs[i] = (qs[i] * rq) * q_scale;
      ks[i] = ks[i] * rk;
    }
    __syncwarp();
    const size_t gate_at = size_t(t) * size_t(p.nv) + size_t(hv);
    const float beta = 1.0f / (1.0f + expf(-p.b[gate_at]));
    const float alpha = expf(-decay_rate * softplus_f(p.a[gate_at] + dt_bias));
    if (column) {
      const float v = row[2 * Kd + hv * p.dv + j];
      float m = 0.0f;
#pragma unroll
      for (int i = 0; i < kMaxDk; ++i)
        if (i < p.dk) {
          S[i] *= alpha;
          m = fmaf(ks[i], S[i], m);
        }
      const float d = beta * (v - m);
      float o = 0.0f;
#pragma unroll
      for (int i = 0; i < kMaxDk; ++i)
        if (i < p.dk) {
          S[i] = fmaf(ks[i], d, S[i]);
          o = fmaf(qs[i], S[i], o);
        }
      p.o[gate_at * size_t(p.dv) + size_t(j)] = o;
    }
    __syncwarp();  // qs and ks are rewritten for the next token
  }
  if (column) {
#pragma unroll
    for (int i = 0; i < kMaxDk; ++i)
      if (i < p.dk) S_head[size_t(i) * size_t(p.dv) + size_t(j)] = S[i];
  }
}

// One block of 128 threads per row of n values: out = w * (x * rsqrt(mean(x^2) + eps)) * silu(z).
constexpr int kGatedNormThreads = 128;
// x and out may be the same buffer (no __restrict__ on them): each thread reads x[i] before writing out[i].
__global__ __launch_bounds__(kGatedNormThreads) void gated_rms_norm_kernel(const float* x, const float* __restrict__ z,
                                                                           const float* __restrict__ w, int n,
                                                                           float eps, float* out) {
  pdl_begin();
  __shared__ float scratch[32];
  const size_t row = size_t(blockIdx.x) * size_t(n);
  float ss = 0.0f;
  for (int i = int(threadIdx.x); i < n; i += kGatedNormThreads) ss += x[row + size_t(i)] * x[row + size_t(i)];
  ss = block_sum(ss, scratch);
  const float scale = 1.0f / sqrtf(ss / float(n) + eps);
  for (int i = int(threadIdx.x); i < n; i += kGatedNormThreads) {
    const float g = z[row + size_t(i)];
    out[row + size_t(i)] = w[i] * (x[row + size_t(i)] * scale) * (g / (1.0f + expf(-g)));
  }
}

}  // namespace megaqwen::cuda

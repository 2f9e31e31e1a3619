// GEMV for decode: y = W x, W [rows, K] bf16 row-major (a weight as stored), x [K] fp32, fp32 sums.
// Decode at batch 1 reads every weight once, so this kernel is a memory stream: each lane loads 16
// bytes (8 bf16, one LDG.128) per step, a warp covers 512 contiguous bytes of a row per step, and
// kRows rows x kUnroll steps of loads are issued before the first multiply so several KB per warp are
// in flight. x (4-12 KB) is read through the read-only cache: every warp re-reads it, from L1/L2.
// One warp owns kRows consecutive rows and finishes them with a shuffle reduction, so no atomics and
// a fixed summation order (results do not depend on the grid). Epilogues: store, residual add
// (y += Wx, the o and down projections), or SwiGLU over interleaved gate/up row pairs.
//
// kNormed: y = W RMSNorm(x), the RMSNorm that precedes the qkv, gate/up and LM-head projections fused
// in, which saves decode a launch and a round trip through memory per norm. Every warp reads all of x
// anyway, so each sums x^2 over what it reads (no block reduction) and multiplies x by the norm
// weight as it goes; the scale 1/sqrt(mean(x^2) + eps) is applied to the finished sums:
// scale * sum_j W_ij (x_j w_j), the separate kernels' sum_j W_ij (w_j (x_j scale)) reassociated.
#pragma once

#include "megaqwen/cuda/kernels/common.cuh"

namespace megaqwen::cuda {

constexpr int kGemvThreads = 128;  // 4 warps per block
constexpr int kGemvRowsPerWarp = 2;
constexpr int kGemvUnroll = 4;

enum class GemvEpilogue { Store, Add, SwiGLU };

template <GemvEpilogue kEpi, bool kNormed = false>
__global__ __launch_bounds__(kGemvThreads) void gemv_bf16_kernel(const bf16* __restrict__ W, const float* __restrict__ x,
                                                                 int rows, int K, float* __restrict__ y,
                                                                 const float* __restrict__ norm_w = nullptr,
                                                                 float eps = 0.0f) {
  pdl_begin();
  constexpr int R = kGemvRowsPerWarp;
  const int lane = threadIdx.x & 31;
  const int r0 = (blockIdx.x * (kGemvThreads / 32) + (threadIdx.x >> 5)) * R;
  if (r0 >= rows) return;
  const int K8 = K / 8;  // 16-byte groups per row
  const uint4* wrow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) wrow[r] = reinterpret_cast<const uint4*>(W + size_t(min(r0 + r, rows - 1)) * size_t(K));
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const float4* w4 = reinterpret_cast<const float4*>(norm_w);
  float ss = 0.0f;  // kNormed: this lane's part of sum(x^2)
  // x's 8 values of group g, times the norm weight when normed.
  auto load_x = [&](int g, float xs[8]) {
    const float4 xa = __ldg(x4 + 2 * g), xb = __ldg(x4 + 2 * g + 1);
    xs[0] = xa.x, xs[1] = xa.y, xs[2] = xa.z, xs[3] = xa.w, xs[4] = xb.x, xs[5] = xb.y, xs[6] = xb.z, xs[7] = xb.w;
    if constexpr (kNormed) {
      const float4 wa = __ldg(w4 + 2 * g), wb = __ldg(w4 + 2 * g + 1);
      const float ws[8] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        ss = fmaf(xs[j], xs[j], ss);
        xs[j] *= ws[j];
      }
    }
  };

  float acc[R] = {};
  int k = lane;
  // Main loop: kUnroll steps of 32 groups, all loads first.
  for (; k + 32 * (kGemvUnroll - 1) < K8; k += 32 * kGemvUnroll) {
    uint4 wv[kGemvUnroll][R];
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) wv[u][r] = __ldg(wrow[r] + k + 32 * u);
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      float xs[8];
      load_x(k + 32 * u, xs);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float f[8];
        unpack_bf16x8(wv[u][r], f);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r] = fmaf(f[j], xs[j], acc[r]);
      }
    }
  }
  // Tail: fewer than kUnroll steps left.
  for (; k < K8; k += 32) {
    float xs[8];
    load_x(k, xs);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float f[8];
      unpack_bf16x8(__ldg(wrow[r] + k), f);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[r] = fmaf(f[j], xs[j], acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = warp_sum(acc[r]);
  if constexpr (kNormed) {
    const float scale = 1.0f / sqrtf(warp_sum(ss) / float(K) + eps);
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] *= scale;
  }
  if (lane != 0) return;
  if constexpr (kEpi == GemvEpilogue::SwiGLU) {
    static_assert(R == 2, "a warp must own one gate/up pair");
    const float g = acc[0];
    y[r0 / 2] = g / (1.0f + expf(-g)) * acc[1];
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r0 + r >= rows) break;
      if constexpr (kEpi == GemvEpilogue::Add) y[r0 + r] += acc[r];
      else y[r0 + r] = acc[r];
    }
  }
}

}  // namespace megaqwen::cuda

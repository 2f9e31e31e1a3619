// Token selection as a two-level reduction, shared by the LM-head stage and its test kernel.
//   level 1: each CTA reduces the ids of its vocabulary slice to (best value, id) (block_best)
//   level 2: the last CTA to take the LmTicket reduces the ctas per-CTA results (merge_best)
// The value compared is select_value(): the raw logit for greedy; logit / T + Gumbel(0, 1) with the
// uniform keyed by (seed, step, id) for sampling: argmax of that is an exact draw from softmax(l / T)
// (the Gumbel-max trick), with the same key and arithmetic as the per-operator path's
// transform_logit (kernels/sampling.cuh), so both paths draw the same token from the same logits.
// Ties go to the lowest id (as the CPU reference), NaN never wins: runs are bit-reproducible.
#pragma once

#include <climits>

#include "megaqwen/cuda/kernels/common.cuh"
#include "megaqwen/cuda/megakernel/layout.h"

namespace megaqwen::cuda::mk {

struct SelectRule {
  float temperature = 1.0f;
  int gumbel = 0;
  uint64_t seed = 0, step = 0;
};

__device__ __forceinline__ float select_value(const SelectRule& r, float logit, int id) {
  float l = logit;
  if (r.temperature != 1.0f) l /= r.temperature;
  if (r.gumbel) {
    const double u = fmax(uniform_at(r.seed, r.step, uint32_t(id)), 0x1.0p-60);
    l = float(double(l) - log(-log(u)));
  }
  return l != l ? -INFINITY : l;
}

__device__ __forceinline__ bool better_pair(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

__device__ __forceinline__ void warp_best(float& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, v, o);
    const int oi = __shfl_xor_sync(kFullMask, i, o);
    if (better_pair(ov, oi, v, i)) v = ov, i = oi;
  }
}

// Block-wide (every thread calls it with its own candidate); thread 0 returns the block's best.
// red: 64 floats of shared memory.
__device__ __forceinline__ void block_best(float& v, int& i, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_best(v, i);
  __syncthreads();
  if (lane == 0) {
    red[warp] = v;
    red[32 + warp] = __int_as_float(i);
  }
  __syncthreads();
  if (warp == 0) {
    v = lane < kWarps ? red[lane] : -INFINITY;
    i = lane < kWarps ? __float_as_int(red[32 + lane]) : INT_MAX;
    warp_best(v, i);
  }
}

// Block-wide: the best of n per-CTA results (written in this launch: read through L2).
__device__ __forceinline__ void merge_best(const float* best_v, const int32_t* best_i, int n, float& v, int& i, float* red) {
  v = -INFINITY;
  i = INT_MAX;
  for (int b = threadIdx.x; b < n; b += kThreads) {
    const float bv = __ldcg(best_v + b);
    const int bi = __ldcg(best_i + b);
    if (better_pair(bv, bi, v, i)) v = bv, i = bi;
  }
  block_best(v, i, red);
}

}  // namespace megaqwen::cuda::mk

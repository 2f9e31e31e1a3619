// Sampling on the GPU: only the chosen token id leaves the device.
//
// transform_logit: the value a draw compares for id i: penalties (repetition / presence / frequency,
// over `counts`, the occurrences of each id in the history) applied to the raw logit, then division
// by the temperature, then (plain sampling only) Gumbel(0,1) noise -log(-log(u)) with u keyed by
// (seed, step, i). argmax(l/T + Gumbel) is an exact draw from softmax(l/T), so plain temperature
// sampling costs the same as greedy. NaN is mapped to -inf (never chosen over a number).
//
// argmax: two passes. Pass 1: `blocks` blocks each reduce a contiguous slice of ceil(V / blocks) ids
// to (value, id), lowest id on ties; pass 2: one block reduces the partials the same way. Any block
// count and any V work (empty slices yield (-inf, INT_MAX)); tests plant the winner at every slice's
// first and last id and at both ends of the vocabulary.
//
// sample_filtered_kernel (top-k, with top-p / min-p): one block of 1024 threads over the transformed
// logits in `scratch`: the K-th largest value by a 4-pass radix select over order-preserving 32-bit
// keys (8 bits per pass, shared-memory histogram), a gather of the K candidates in id order for ties,
// a bitonic sort (value descending, id ascending, as the CPU Sampler orders them), then the CPU
// Sampler's arithmetic on the sorted list (fp64 probabilities normalized over the K, top-p prefix,
// min-p floor, one draw). K = top_k <= kSampleCandidates.
//
// sample_nucleus_kernel (top-p / min-p with top-k off): one block of 1024 threads, the maximum, then
// nucleus.cuh's draw over all V values (fixed-point masses, no sort), which the megakernel shares.
#pragma once

#include <climits>

#include "megaqwen/cuda/kernels.h"
#include "megaqwen/cuda/kernels/common.cuh"
#include "megaqwen/cuda/kernels/nucleus.cuh"

namespace megaqwen::cuda {

__device__ __forceinline__ float transform_logit(const LogitTransform& t, const float* __restrict__ logits, int i) {
  float l = logits[i];
  if (t.counts) {
    const int c = t.counts[i];
    if (c > 0) {
      if (t.repetition_penalty != 1.0f) l = l > 0.0f ? l / t.repetition_penalty : l * t.repetition_penalty;
      // __fmul_rn / __fadd_rn: no FMA contraction, so the value is bit-identical to the CPU Sampler's
      // (greedy with penalties must pick the same id on both engines).
      l -= __fadd_rn(t.presence_penalty, __fmul_rn(t.frequency_penalty, float(c)));
    }
  }
  if (t.temperature != 1.0f) l /= t.temperature;
  if (t.gumbel) {
    const double u = fmax(uniform_at(t.seed, t.step, uint32_t(i)), 0x1.0p-60);
    l = float(double(l) - log(-log(u)));
  }
  return l != l ? -INFINITY : l;
}

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

__device__ __forceinline__ uint64_t pack_pair(float v, int i) {
  return (uint64_t(__float_as_uint(v)) << 32) | uint32_t(i);
}

// Reduces (v, i) over the block (blockDim.x a multiple of 32, <= 1024); thread 0 gets the result.
__device__ __forceinline__ void block_argmax(float& v, int& i) {
  __shared__ float sv[32];
  __shared__ int si[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, v, o);
    const int oi = __shfl_xor_sync(kFullMask, i, o);
    if (better(ov, oi, v, i)) v = ov, i = oi;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if (lane == 0) sv[warp] = v, si[warp] = i;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? sv[lane] : -INFINITY;
    i = lane < warps ? si[lane] : INT_MAX;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(kFullMask, v, o);
      const int oi = __shfl_xor_sync(kFullMask, i, o);
      if (better(ov, oi, v, i)) v = ov, i = oi;
    }
  }
}

constexpr int kArgmaxThreads = 256;

__global__ __launch_bounds__(kArgmaxThreads) void argmax_partial_kernel(const float* __restrict__ logits, int V,
                                                                        LogitTransform t, uint64_t* __restrict__ partial) {
  pdl_begin();
  const int slice = div_up(V, gridDim.x);
  const int begin = blockIdx.x * slice, end = min(V, begin + slice);
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int i = begin + threadIdx.x; i < end; i += kArgmaxThreads) {
    const float v = transform_logit(t, logits, i);
    if (better(v, i, bv, bi)) bv = v, bi = i;
  }
  block_argmax(bv, bi);
  if (threadIdx.x == 0) partial[blockIdx.x] = pack_pair(bv, bi);
}

__global__ __launch_bounds__(kArgmaxThreads) void argmax_final_kernel(const uint64_t* __restrict__ partial, int blocks,
                                                                      int32_t* __restrict__ out) {
  pdl_begin();
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int b = threadIdx.x; b < blocks; b += kArgmaxThreads) {
    const uint64_t p = partial[b];
    const float v = __uint_as_float(uint32_t(p >> 32));
    const int i = int(uint32_t(p));
    if (better(v, i, bv, bi)) bv = v, bi = i;
  }
  block_argmax(bv, bi);
  if (threadIdx.x == 0) out[0] = bi == INT_MAX ? 0 : bi;
}

__global__ void transform_logits_kernel(const float* __restrict__ logits, int V, LogitTransform t, float* __restrict__ dst) {
  pdl_begin();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < V; i += gridDim.x * blockDim.x) dst[i] = transform_logit(t, logits, i);
}

constexpr int kSampleThreads = 1024;
static_assert(kSampleCandidates == kSampleThreads, "one candidate per thread in the bitonic sort");

__global__ __launch_bounds__(kSampleThreads) void sample_filtered_kernel(const float* __restrict__ v, int V, int K,
                                                                         float top_p, float min_p, uint64_t seed,
                                                                         uint64_t step, int32_t* __restrict__ out) {
  pdl_begin();
  __shared__ unsigned hist[256];
  __shared__ float cand_v[kSampleThreads];
  __shared__ int cand_i[kSampleThreads];
  __shared__ double probs[kSampleThreads];
  __shared__ unsigned s_prefix, s_remaining, s_gt, s_eq;
  __shared__ unsigned warp_eq[32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // Radix select: the key of the K-th largest value, and how many of the values equal to it to take.
  if (tid == 0) s_prefix = 0, s_remaining = unsigned(K);
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    if (tid < 256) hist[tid] = 0;
    __syncthreads();
    const uint32_t prefix = s_prefix;
    for (int i = tid; i < V; i += kSampleThreads) {
      const uint32_t key = order_key(v[i]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      unsigned cum = 0;
      for (int b = 255; b >= 0; --b) {
        if (cum + hist[b] >= s_remaining) {
          s_prefix = prefix | (uint32_t(b) << shift);
          s_remaining -= cum;
          break;
        }
        cum += hist[b];
      }
    }
    mask |= 0xffu << shift;
    __syncthreads();
  }
  const uint32_t kth = s_prefix;
  const unsigned take_eq = s_remaining, n_gt = unsigned(K) - take_eq;

  // Gather: every key above the K-th, and the lowest-id `take_eq` keys equal to it (in id order).
  if (tid == 0) s_gt = 0, s_eq = 0;
  __syncthreads();
  for (int base = 0; base < V; base += kSampleThreads) {
    const int i = base + tid;
    const uint32_t key = i < V ? order_key(v[i]) : 0u;
    const bool gt = i < V && key > kth, eq = i < V && key == kth;
    if (gt) {
      const unsigned slot = atomicAdd(&s_gt, 1u);
      cand_v[slot] = v[i];
      cand_i[slot] = i;
    }
    const unsigned ballot = __ballot_sync(kFullMask, eq);
    if (lane == 0) warp_eq[warp] = __popc(ballot);
    __syncthreads();
    unsigned before = s_eq;
    for (int w = 0; w < warp; ++w) before += warp_eq[w];
    before += __popc(ballot & ((1u << lane) - 1u));
    if (eq && before < take_eq) {
      cand_v[n_gt + before] = v[i];
      cand_i[n_gt + before] = i;
    }
    __syncthreads();
    if (tid == 0) {
      unsigned total = 0;
      for (int w = 0; w < kSampleThreads / 32; ++w) total += warp_eq[w];
      s_eq += total;
    }
    __syncthreads();
  }
  if (tid >= K) cand_v[tid] = -INFINITY, cand_i[tid] = INT_MAX;
  __syncthreads();

  // Bitonic sort: value descending, id ascending.
  for (int k = 2; k <= kSampleThreads; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      const int other = tid ^ j;
      if (other > tid) {
        const float av = cand_v[tid], bv = cand_v[other];
        const int ai = cand_i[tid], bi = cand_i[other];
        const bool b_first = better(bv, bi, av, ai);
        if ((tid & k) == 0 ? b_first : !b_first && !(av == bv && ai == bi)) {
          cand_v[tid] = bv, cand_i[tid] = bi;
          cand_v[other] = av, cand_i[other] = ai;
        }
      }
      __syncthreads();
    }
  }

  // Probabilities relative to the top value, normalized over the top-k set.
  const float top = cand_v[0];
  probs[tid] = tid < K ? exp(double(cand_v[tid]) - double(top)) : 0.0;
  __syncthreads();
  if (tid == 0) {
    double total = 0.0;
    for (int i = 0; i < K; ++i) total += probs[i];
    int keep = K;
    if (top_p < 1.0f) {
      double mass = 0.0;
      int n = 0;
      while (n < keep) {
        mass += probs[n++] / total;
        if (mass >= double(top_p)) break;
      }
      keep = n;
    }
    if (min_p > 0.0f) {
      const double floor = double(min_p) * (probs[0] / total);
      int n = 1;
      while (n < keep && probs[n] / total >= floor) ++n;
      keep = n;
    }
    double mass = 0.0;
    for (int i = 0; i < keep; ++i) mass += probs[i] / total;
    double r = uniform_at(seed, step, 0xffffffffu) * mass;
    int chosen = cand_i[keep - 1];
    for (int i = 0; i < keep; ++i) {
      r -= probs[i] / total;
      if (r < 0) {
        chosen = cand_i[i];
        break;
      }
    }
    out[0] = chosen;
  }
}

constexpr int kNucleusThreads = 1024;
constexpr int kNucleusMembers = 3072;  // 24 KB: a boundary bin up to this size is searched in shared memory

__global__ __launch_bounds__(kNucleusThreads) void sample_nucleus_kernel(const float* __restrict__ v, int V,
                                                                         float top_p, float min_p, uint64_t seed,
                                                                         uint64_t step, int32_t* __restrict__ out) {
  pdl_begin();
  __shared__ NucleusShared s;
  __shared__ NucleusMember members[kNucleusMembers];
  __shared__ float top;
  __shared__ int top_id;
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    if (better(v[i], i, bv, bi)) bv = v[i], bi = i;
  block_argmax(bv, bi);
  if (threadIdx.x == 0) top = bv, top_id = bi == INT_MAX ? 0 : bi;
  __syncthreads();
  const int id = nucleus_draw(v, V, top, top_id, NucleusRule{top_p, min_p, seed, step}, s, members, kNucleusMembers);
  if (threadIdx.x == 0) out[0] = id;
}

}  // namespace megaqwen::cuda

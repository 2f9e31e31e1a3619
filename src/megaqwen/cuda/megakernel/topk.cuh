// Block-wide top-k primitives for the megakernel's filtered token selection (select.cuh): small,
// exact, and cheap at the sizes the kernel needs (a CTA's vocabulary slice of ~1,152 values; the
// ctas x K per-CTA candidates). Every function is called by all kThreads threads of a CTA.
//
//   order_key()          (kernels/common.cuh) float -> uint32 whose unsigned order is the float order
//   KeyBlock             up to kSelPerThread keys per thread, a contiguous run of indices each
//                        (thread t holds [t * per, (t + 1) * per)), so "index order" is (thread, j)
//   kth_largest()        radix select, 8 bits per pass (4 passes, a 256-bin shared histogram): the
//                        key of the K-th largest and how many keys equal to it belong to the top K
//   exclusive_scan()     block-wide exclusive prefix sum of one int per thread
//   compact_top_k()      the indices of the top K in index order: every key above the K-th, and the
//                        lowest-index keys equal to it (ties go to the lowest id, as everywhere else)
//   sort_candidates()    bitonic sort of <= kMaxTopK (value, id) pairs: value descending, id ascending
//
// Keys live in registers (a fully unrolled loop over kSelPerThread with a runtime bound), so the
// radix passes touch only the shared histogram.
#pragma once

#include <climits>
#include <cstdint>

#include "megaqwen/cuda/kernels/common.cuh"
#include "megaqwen/cuda/megakernel/layout.h"

namespace megaqwen::cuda::mk {

// Shared scratch of the selection primitives (inside the stage's vector region).
struct TopKShared {
  uint32_t hist[256];
  int scan[kWarps];
  uint32_t prefix, remaining;
  float cand_v[kMaxTopK];
  int32_t cand_i[kMaxTopK];
  double probs[kMaxTopK];
  double total;
  int chosen;
};

struct KeyBlock {
  uint32_t key[kSelPerThread];
  int per = 0;  // keys per thread for this n: ceil(n / kThreads) (<= kSelPerThread, checked by the host)
  __device__ int index(int j) const { return int(threadIdx.x) * per + j; }
};

// Fills kb with key_at(i) for i < n (0 past n: padding below every real key).
template <class KeyAt>
__device__ __forceinline__ void load_keys(KeyBlock& kb, int n, KeyAt key_at) {
  kb.per = (n + kThreads - 1) / kThreads;
#pragma unroll
  for (int j = 0; j < kSelPerThread; ++j) {
    const int i = kb.index(j);
    kb.key[j] = j < kb.per && i < n ? key_at(i) : 0u;
  }
}

// Radix select: returns the K-th largest key (1 <= K <= number of non-padding keys) and sets
// take_eq to how many keys equal to it are in the top K (the rest of the top K is above it).
__device__ __forceinline__ uint32_t kth_largest(const KeyBlock& kb, int K, TopKShared& s, int& take_eq) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) s.prefix = 0, s.remaining = uint32_t(K);
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    if (threadIdx.x < 256) s.hist[threadIdx.x] = 0;
    __syncthreads();
    // Both read here, between the barriers: warp 0 rewrites them only after the next one.
    const uint32_t prefix = s.prefix, remaining = s.remaining;
#pragma unroll
    for (int j = 0; j < kSelPerThread; ++j)
      if (j < kb.per && (kb.key[j] & mask) == prefix) atomicAdd(&s.hist[(kb.key[j] >> shift) & 255u], 1u);
    __syncthreads();
    // Warp 0: lane owns bins [8 lane, 8 lane + 8); the bin where the count from the top reaches
    // `remaining` holds the K-th key.
    if (warp == 0) {
      uint32_t c[8], local = 0;
#pragma unroll
      for (int b = 0; b < 8; ++b) local += c[b] = s.hist[8 * lane + b];
      uint32_t suffix = local;  // sum over lanes >= lane
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t v = __shfl_down_sync(kFullMask, suffix, o);
        if (lane + o < 32) suffix += v;
      }
      const uint32_t above = suffix - local;
      if (above < remaining && remaining <= suffix) {
        uint32_t cum = above;
        for (int b = 7; b >= 0; --b) {
          if (cum + c[b] >= remaining) {
            s.prefix = prefix | (uint32_t(8 * lane + b) << shift);
            s.remaining = remaining - cum;
            break;
          }
          cum += c[b];
        }
      }
    }
    mask |= 0xffu << shift;
    __syncthreads();
  }
  take_eq = int(s.remaining);
  return s.prefix;
}

// Exclusive prefix sum of v over threads (in thread order); every thread gets its own prefix and
// `total`. Ends with __syncthreads (s.scan reusable).
__device__ __forceinline__ int exclusive_scan(int v, TopKShared& s, int& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int inc = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int u = __shfl_up_sync(kFullMask, inc, o);
    if (lane >= o) inc += u;
  }
  if (lane == 31) s.scan[warp] = inc;
  __syncthreads();
  int before = 0;
  total = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const int c = s.scan[w];
    if (w < warp) before += c;
    total += c;
  }
  __syncthreads();
  return before + inc - v;
}

// Calls emit(slot, index, key) for each of the top K keys, slot = its rank in index order (0..K-1).
template <class Emit>
__device__ __forceinline__ void compact_top_k(const KeyBlock& kb, uint32_t kth, int take_eq, TopKShared& s, Emit emit) {
  int eq = 0;
#pragma unroll
  for (int j = 0; j < kSelPerThread; ++j) eq += j < kb.per && kb.key[j] == kth;
  int total = 0;
  int eq_before = exclusive_scan(eq, s, total);
  int sel = 0;
  {
    int r = eq_before;
#pragma unroll
    for (int j = 0; j < kSelPerThread; ++j) {
      if (j >= kb.per) continue;
      if (kb.key[j] > kth) ++sel;
      else if (kb.key[j] == kth && r++ < take_eq) ++sel;
    }
  }
  int slot = exclusive_scan(sel, s, total);
  int r = eq_before;
#pragma unroll
  for (int j = 0; j < kSelPerThread; ++j) {
    if (j >= kb.per) continue;
    const bool take = kb.key[j] > kth || (kb.key[j] == kth && r++ < take_eq);
    if (take) emit(slot++, kb.index(j), kb.key[j]);
  }
}

__device__ __forceinline__ bool ranks_before(float av, int ai, float bv, int bi) { return av > bv || (av == bv && ai < bi); }

// Sorts s.cand_v / s.cand_i [kMaxTopK] (entries past the real ones: -inf / INT_MAX) best first.
__device__ __forceinline__ void sort_candidates(TopKShared& s) {
  static_assert((kMaxTopK & (kMaxTopK - 1)) == 0 && kMaxTopK <= kThreads, "bitonic sort: a power of two, a thread each");
  const int tid = threadIdx.x;
  __syncthreads();
  for (int k = 2; k <= kMaxTopK; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      const int other = tid ^ j;
      if (tid < kMaxTopK && other > tid) {
        const float av = s.cand_v[tid], bv = s.cand_v[other];
        const int ai = s.cand_i[tid], bi = s.cand_i[other];
        const bool b_first = ranks_before(bv, bi, av, ai);
        // Ascending blocks (tid & k == 0) put the better pair first.
        if ((tid & k) == 0 ? b_first : ranks_before(av, ai, bv, bi)) {
          s.cand_v[tid] = bv, s.cand_i[tid] = bi;
          s.cand_v[other] = av, s.cand_i[other] = ai;
        }
      }
      __syncthreads();
    }
  }
}

}  // namespace megaqwen::cuda::mk

// Token selection as a two-level reduction, shared by the LM-head stage and its test kernel.
//
// select_value(): the transformed logit of id i, as the per-operator path's transform_logit
// (kernels/sampling.cuh) computes it, bit for bit: repetition / presence / frequency penalties over the
// occurrence counts, division by the temperature, and for plain sampling Gumbel(0, 1) noise keyed by
// (seed, step, id). NaN becomes -inf (never chosen over a number).
//
// Argmax modes (greedy; plain sampling: argmax of l / T + Gumbel is an exact draw from softmax(l / T)):
//   level 1: each CTA reduces its vocabulary slice to (best value, id) (block_best)
//   level 2: the last CTA to take the LmTicket reduces the ctas per-CTA results (merge_best)
// Filtered mode (top_k > 0, with top_p / min_p; topk.cuh):
//   level 1: each CTA writes its slice's transformed values, then keeps its top min(K, rows) in id
//            order (cta_top_k)
//   level 2: the selecting CTA radix-selects the top K of the ctas x K candidates, sorts them (value
//            descending, id ascending) and runs the Sampler's steps on them: fp64 softmax over the K,
//            the top-p prefix, the min-p floor, one draw with u keyed by (seed, step, 0xffffffff)
//            (merge_and_draw), bit for bit as the per-operator sample_filtered with top_k <= 1024
//            (the CPU Sampler subtracts the top logit in fp32 before exp: last-bit differences).
// Nucleus mode (top-p / min-p with top-k off; kernels/nucleus.cuh):
//   level 1: each CTA writes its slice's transformed values and reduces them to its best (value, id)
//   level 2: the selecting CTA takes the best of the bests (the top value) and runs nucleus_draw over
//            all V values, the per-operator sample_nucleus_kernel's arithmetic: the same id
// Ties go to the lowest id everywhere: runs are bit-reproducible.
#pragma once

#include <climits>

#include "megaqwen/cuda/kernels/common.cuh"
#include "megaqwen/cuda/kernels/nucleus.cuh"
#include "megaqwen/cuda/megakernel/layout.h"
#include "megaqwen/cuda/megakernel/topk.cuh"

namespace megaqwen::cuda::mk {

// The selection's shared scratch: one mode per launch.
union SelectShared {
  TopKShared topk;
  NucleusShared nucleus;
};

struct SelectRule {
  float temperature = 1.0f;
  int gumbel = 0;
  uint64_t seed = 0, step = 0;
  const int32_t* counts = nullptr;  // written during the launch: read through L2
  float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
};

__device__ __forceinline__ float select_value(const SelectRule& r, float logit, int id) {
  float l = logit;
  if (r.counts) {
    const int c = __ldcg(r.counts + id);
    if (c > 0) {
      if (r.repetition_penalty != 1.0f) l = l > 0.0f ? l / r.repetition_penalty : l * r.repetition_penalty;
      l -= __fadd_rn(r.presence_penalty, __fmul_rn(r.frequency_penalty, float(c)));  // no FMA: as the CPU
    }
  }
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

// Filtered level 1, block-wide: vals[begin, end) (this CTA's transformed values, or its raw logits
// for the logprobs, stored by its own threads before a __syncthreads) -> its top k = min(K, end -
// begin) in id order at cand_v/cand_i [cta * K, cta * K + k), and k at cand_n[cta]. NaN ranks as -inf.
__device__ __forceinline__ void cta_top_k(const float* vals, int begin, int end, int K, int cta, float* cand_v,
                                          int32_t* cand_i, int32_t* cand_n, TopKShared& s) {
  const int n = end - begin, k = min(K, n);
  if (k > 0) {  // block-uniform
    KeyBlock kb;
    load_keys(kb, n, [&](int i) {
      const float v = __ldcg(vals + begin + i);
      return order_key(v != v ? -INFINITY : v);  // NaN (raw logits: the logprobs) ranks with -inf
    });
    int take_eq = 0;
    const uint32_t kth = kth_largest(kb, k, s, take_eq);
    compact_top_k(kb, kth, take_eq, s, [&](int slot, int i, uint32_t key) {
      __stcg(cand_v + size_t(cta) * K + slot, key_value(key));
      __stcg(cand_i + size_t(cta) * K + slot, begin + i);
    });
  }
  if (threadIdx.x == 0) __stcg(cand_n + cta, k);
}

struct FilterRule {
  int top_k = 0;
  float top_p = 1.0f, min_p = 0.0f;
  uint64_t seed = 0, step = 0;
};

// Block-wide: the top K of the ctas per-CTA candidate lists (cta_top_k's output, written in this
// launch) into s.cand_v / s.cand_i [0, K), best first (value descending, id ascending); entries past
// K up to kMaxTopK are -inf / INT_MAX. K <= the number of candidates. Ends with __syncthreads.
__device__ __forceinline__ void merge_top_k(const float* cand_v, const int32_t* cand_i, const int32_t* cand_n, int ctas,
                                            int K, TopKShared& s) {
  const int tid = threadIdx.x;
  KeyBlock kb;
  // Candidate list c occupies [c * K, c * K + cand_n[c]); the rest is padding (key 0).
  load_keys(kb, ctas * K, [&](int i) {
    const int c = i / K;
    return i - c * K < __ldcg(cand_n + c) ? order_key(__ldcg(cand_v + i)) : 0u;
  });
  int take_eq = 0;
  const uint32_t kth = kth_largest(kb, K, s, take_eq);
  for (int i = tid; i < kMaxTopK; i += kThreads) s.cand_v[i] = -INFINITY, s.cand_i[i] = INT_MAX;
  __syncthreads();
  compact_top_k(kb, kth, take_eq, s, [&](int slot, int i, uint32_t key) {
    s.cand_v[slot] = key_value(key);
    s.cand_i[slot] = __ldcg(cand_i + i);
  });
  sort_candidates(s);
}

// Filtered level 2, block-wide, by the CTA that saw every CTA's candidates (after its acquire): the
// drawn id (every thread gets it). K <= the number of candidates (the host keeps top_k <= vocab).
__device__ __forceinline__ int merge_and_draw(const float* cand_v, const int32_t* cand_i, const int32_t* cand_n, int ctas,
                                              const FilterRule& f, TopKShared& s) {
  const int K = f.top_k, tid = threadIdx.x;
  merge_top_k(cand_v, cand_i, cand_n, ctas, K, s);
  // Probabilities relative to the top value, normalized over the K (fp64, as the CPU Sampler).
  const float top = s.cand_v[0];
  if (tid < kMaxTopK) s.probs[tid] = tid < K ? exp(double(s.cand_v[tid]) - double(top)) : 0.0;
  __syncthreads();
  if (tid == 0) {
    double total = 0.0;
    for (int i = 0; i < K; ++i) total += s.probs[i];  // in order: the same sum as the per-op sampler
    s.total = total;
  }
  __syncthreads();
  // The normalized probabilities, one division per thread (the per-op sampler divides the same
  // values by the same total inside its loops: identical results, without K serial fp64 divisions).
  if (tid < K) s.probs[tid] = s.probs[tid] / s.total;
  __syncthreads();
  if (tid == 0) {
    int keep = K;
    if (f.top_p < 1.0f) {
      double mass = 0.0;
      int n = 0;
      while (n < keep) {
        mass += s.probs[n++];
        if (mass >= double(f.top_p)) break;
      }
      keep = n;
    }
    if (f.min_p > 0.0f) {
      const double floor = double(f.min_p) * s.probs[0];
      int n = 1;
      while (n < keep && s.probs[n] >= floor) ++n;
      keep = n;
    }
    double mass = 0.0;
    for (int i = 0; i < keep; ++i) mass += s.probs[i];
    double r = uniform_at(f.seed, f.step, 0xffffffffu) * mass;
    int chosen = s.cand_i[keep - 1];
    for (int i = 0; i < keep; ++i) {
      r -= s.probs[i];
      if (r < 0) {
        chosen = s.cand_i[i];
        break;
      }
    }
    s.chosen = chosen;
  }
  __syncthreads();
  return s.chosen;
}

// Nucleus level 2, block-wide, by the selecting CTA: the best of the per-CTA bests is the top value,
// then nucleus_draw over vals [V] with `capacity` members of shared memory. Every thread gets the id.
__device__ __forceinline__ int merge_and_draw_nucleus(const float* best_v, const int32_t* best_i, int ctas,
                                                      const float* vals, int V, const NucleusRule& r, float* red,
                                                      SelectShared& s, NucleusMember* members, int capacity) {
  float top;
  int top_id;
  merge_best(best_v, best_i, ctas, top, top_id, red);  // thread 0's
  if (threadIdx.x == 0) s.nucleus.chosen = top_id == INT_MAX ? 0 : top_id, red[0] = top;
  __syncthreads();
  top = red[0];
  top_id = s.nucleus.chosen;
  __syncthreads();
  return nucleus_draw(vals, V, top, top_id, r, s.nucleus, members, capacity);
}

// The token selection alone over given logits (select_test_kernel, and the host emulator's tests):
// CTA b owns ids [b * ceil(V / ctas), ...) as the LM head's split; the same select_value /
// block_best / cta_top_k, ticket, merge_best / merge_and_draw / merge_and_draw_nucleus path.
// `ticket()` (thread 0) returns the old value of an acq_rel add of 1 to a.ticket (a parameter:
// select.cuh does not include sync.cuh); members / capacity: the nucleus mode's member buffer.
// Block-wide; returns the id in every thread of the selecting CTA, -1 in the others.
template <class Ticket>
__device__ __forceinline__ int select_over_logits(const SelectTestArgs& a, float* red, int& last, SelectShared& s,
                                                  NucleusMember* members, int capacity, Ticket ticket) {
  const int ctas = int(gridDim.x), cta = int(blockIdx.x);
  const int per = (a.V + ctas - 1) / ctas;
  const int begin = min(a.V, cta * per), end = min(a.V, begin + per);
  const SelectRule rule{a.temperature, a.gumbel ? 1 : 0, a.seed, a.step, a.counts,
                        a.repetition_penalty, a.presence_penalty, a.frequency_penalty};
  const bool filtered = a.top_k > 0, keep_vals = filtered || a.nucleus;
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int i = begin + int(threadIdx.x); i < end; i += kThreads) {
    const float v = select_value(rule, a.logits[i], i);
    if (keep_vals) __stcg(a.sel_vals + i, v);
    if (!filtered && better_pair(v, i, bv, bi)) bv = v, bi = i;
  }
  if (filtered) {
    __syncthreads();
    cta_top_k(a.sel_vals, begin, end, a.top_k, cta, a.cand_v, a.cand_i, a.cand_n, s.topk);
  } else {
    block_best(bv, bi, red);
    if (threadIdx.x == 0) {
      __stcg(a.best_v + cta, bv);
      __stcg(a.best_i + cta, bi);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) last = ticket() == uint32_t(ctas) - 1u;
  __syncthreads();
  if (!last) return -1;
  int id;
  if (filtered) {
    id = merge_and_draw(a.cand_v, a.cand_i, a.cand_n, ctas, FilterRule{a.top_k, a.top_p, a.min_p, a.seed, a.step},
                        s.topk);
  } else if (a.nucleus) {
    id = merge_and_draw_nucleus(a.best_v, a.best_i, ctas, a.sel_vals, a.V, NucleusRule{a.top_p, a.min_p, a.seed, a.step},
                                red, s, members, capacity);
  } else {
    float v;
    merge_best(a.best_v, a.best_i, ctas, v, id, red);  // the answer is thread 0's
    if (threadIdx.x == 0) last = id;
    __syncthreads();
    id = last;
  }
  return id == INT_MAX ? 0 : id;
}

}  // namespace megaqwen::cuda::mk

// Nucleus sampling (top-p / min-p with no top-k) over the whole vocabulary in one block: exact, no
// sort, and the same bits under every thread schedule. The per-operator sampler
// (sample_nucleus_kernel, 1024 threads) and the megakernel's selecting CTA (512 threads) both call
// nucleus_draw, so the two decode paths draw the same token from the same values.
//
// The CPU Sampler sorts all V values and walks the sorted list. A block cannot sort 152k values per
// token cheaply, and fp64 sums in a data-dependent order would tie the draw to the schedule. Instead:
//
//   weights   w_i = round(expf(v_i - top) * 2^45) as uint64 (fixed point). Integer sums are exact in
//             any order, so shared-memory atomics give the same bits every time and the cut and the
//             draw are decided on exact masses. The top value weighs 2^45; V * 2^45 < 2^63 for any
//             V < 2^18. A weight below 2^-46 of the top's rounds to 0 and is never drawn (together
//             at most V * 2^-46 ~ 2e-9 of the mass).
//   prefixes  "the shortest prefix of the sorted order (value descending, id ascending) whose mass
//             reaches a target" without sorting (nucleus_prefix_end): a histogram of masses over 256
//             coarse bins of (top - v) * 8 (bins follow the value order, and real logits spread over
//             many of them, so the atomics seldom collide), the bin where the running mass reaches
//             the target, then four radix passes of 8 bits over the order keys of that bin's members.
//             The prefix ends on a key and takes some of the values equal to it (in id order: equal
//             keys weigh the same, so only their count matters for the mass).
//   cuts      top-p keeps the shortest prefix reaching ceil(top_p * total); min-p keeps every weight
//             >= min_p * 2^45 (the CPU's p_i >= min_p * p_top), itself a prefix; the kept set is the
//             shorter of the two.
//   the draw  r = floor(u * kept mass), u = uniform_at(seed, step, 0xffffffff): the drawn id ends the
//             shortest prefix whose mass exceeds r, which is the CPU's walk (subtract the sorted
//             probabilities from u * mass until below zero) in integers; a second prefix search, then
//             the n-th id in id order among its key's equals.
//
// Cost: one block reads the V values from L2 once for the weights and the coarse histogram, and once
// per prefix search to copy the boundary bin's members (key, id) into shared memory; the four radix
// passes then run over those members alone (a bin larger than the caller's member buffer is searched
// over all V values instead: four more passes). The draw's search reuses the top-p search's members
// when both ends fall in one bin. Each pass keeps two 16-byte loads in flight per thread: a single SM
// reading 0.6 MB from L2 is latency-bound otherwise. Against the CPU Sampler: the same kept set and
// draw law, except where a running mass lands within ~1e-7 of a cut (fp32 exp here, fp64 there) and
// for the tail below 2^-46.
#pragma once

#include <climits>

#include "megaqwen/cuda/kernels.h"  // kNucleusMaxVocab
#include "megaqwen/cuda/kernels/common.cuh"

namespace megaqwen::cuda {

constexpr int kNucleusBins = 256;
constexpr float kNucleusBinsPerLogit = 8.0f;  // coarse bin width: 1/8 of a (transformed) logit
constexpr double kNucleusOne = 0x1p45;        // the top value's weight

// A member of the boundary bin, copied to shared memory for the radix passes.
struct NucleusMember {
  uint32_t key;
  int32_t id;
};

// Shared scratch (about 6.3 KB); the caller provides it and a member buffer (the megakernel: its
// vector region).
struct NucleusShared {
  unsigned long long coarse[kNucleusBins];  // mass per coarse bin; bin 0 holds the top
  uint32_t coarse_n[kNucleusBins];          // values per coarse bin
  unsigned long long fine[kNucleusBins];    // mass per key byte of a radix pass; slot 0 the largest byte
  uint32_t first_id[kNucleusBins];          // lowest id per slot (last radix pass: one key per slot)
  unsigned long long total, minp_mass, remaining;
  int rank;
  int members_n, members_bin;  // the member buffer holds coarse bin members_bin (-1: none)
  int warp_hits[32];
  int chosen;
};

__device__ __forceinline__ unsigned long long nucleus_weight(float v, float top) {
  return __double2ull_rn(double(expf(v - top)) * kNucleusOne);
}

// Coarse bin of v (<= top): non-decreasing as v falls, so bins follow the sorted order; -inf goes last.
__device__ __forceinline__ int nucleus_bin(float v, float top) {
  const float d = (top - v) * kNucleusBinsPerLogit;
  return d < float(kNucleusBins - 1) ? int(d) : kNucleusBins - 1;
}

// Block-wide: f(i, vals[i]) for every i < V, once each, from some thread (no order: every use sums
// integers or takes a minimum). Two 16-byte loads in flight per thread when vals is 16-byte aligned.
template <class F>
__device__ __forceinline__ void nucleus_for_each(const float* vals, int V, F&& f) {
  const int tid = int(threadIdx.x), nt = int(blockDim.x);
  int done = 0;
  if ((reinterpret_cast<uintptr_t>(vals) & 15u) == 0) {
    const int n4 = V / 4;
    const float4* v4 = reinterpret_cast<const float4*>(vals);
    int j = tid;
    for (; j + nt < n4; j += 2 * nt) {
      const float4 a = __ldcg(v4 + j), b = __ldcg(v4 + j + nt);
      const int ia = 4 * j, ib = 4 * (j + nt);
      f(ia, a.x), f(ia + 1, a.y), f(ia + 2, a.z), f(ia + 3, a.w);
      f(ib, b.x), f(ib + 1, b.y), f(ib + 2, b.z), f(ib + 3, b.w);
    }
    if (j < n4) {
      const float4 a = __ldcg(v4 + j);
      f(4 * j, a.x), f(4 * j + 1, a.y), f(4 * j + 2, a.z), f(4 * j + 3, a.w);
    }
    done = 4 * n4;
  }
  for (int i = done + tid; i < V; i += nt) f(i, __ldcg(vals + i));
}

// Warp 0 (all 32 lanes): the first slot b of hist (in rank order) where hist[0] + ... + hist[b]
// reaches need (1 <= need <= their sum): s.rank = b, s.remaining = need - (hist[0] + ... + hist[b-1]).
__device__ __forceinline__ void nucleus_find_rank(const unsigned long long* hist, unsigned long long need,
                                                  NucleusShared& s) {
  const int lane = threadIdx.x & 31;
  unsigned long long c[8], local = 0;
#pragma unroll
  for (int b = 0; b < 8; ++b) local += c[b] = hist[8 * lane + b];
  unsigned long long incl = local;  // sum over lanes <= lane
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long v = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += v;
  }
  const unsigned long long before = incl - local;
  if (before < need && need <= incl) {  // exactly one lane
    unsigned long long cum = before;
    for (int b = 0; b < 8; ++b) {
      if (cum + c[b] >= need) {
        s.rank = 8 * lane + b;
        s.remaining = need - cum;
        break;
      }
      cum += c[b];
    }
  }
}

// Where a prefix of the sorted order ends.
struct PrefixEnd {
  uint32_t key;                 // the order key of its last value
  unsigned long long weight;    // the weight of each value with that key
  unsigned long long taken;     // how many values with that key it takes (the lowest ids)
  unsigned long long mass;      // its mass (>= the target)
  int first_id;                 // the lowest id with that key
};

// Block-wide: the shortest prefix whose mass reaches target (1 <= target <= the total). s.coarse and
// s.coarse_n must hold the coarse histogram (nucleus_draw's first pass). members: room for
// `capacity` members (0: always search over all V). Every thread gets the result.
__device__ __forceinline__ PrefixEnd nucleus_prefix_end(const float* vals, int V, float top, unsigned long long target,
                                                        NucleusShared& s, NucleusMember* members, int capacity) {
  const int tid = int(threadIdx.x), nt = int(blockDim.x);
  if (tid < 32) nucleus_find_rank(s.coarse, target, s);
  __syncthreads();
  const int bin = s.rank;
  const int n = int(s.coarse_n[bin]);
  const bool compact = n <= capacity;  // block-uniform
  if (compact && s.members_bin != bin) {
    __syncthreads();  // every thread has read members_bin
    if (tid == 0) s.members_n = 0, s.members_bin = bin;
    __syncthreads();
    nucleus_for_each(vals, V, [&](int i, float v) {
      if (nucleus_bin(v, top) == bin) members[atomicAdd(&s.members_n, 1)] = NucleusMember{order_key(v), i};
    });
    __syncthreads();
  }
  uint32_t prefix = 0, mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < kNucleusBins; i += nt) s.fine[i] = 0, s.first_id[i] = UINT_MAX;
    __syncthreads();
    auto visit = [&](uint32_t key, int i) {
      if ((key & mask) != prefix) return;
      const int slot = 255 - int((key >> shift) & 255u);
      atomicAdd(&s.fine[slot], nucleus_weight(key_value(key), top));
      if (shift == 0) atomicMin(&s.first_id[slot], uint32_t(i));
    };
    if (compact) {
      for (int j = tid; j < n; j += nt) visit(members[j].key, members[j].id);
    } else {
      nucleus_for_each(vals, V, [&](int i, float v) {
        if (nucleus_bin(v, top) == bin) visit(order_key(v), i);
      });
    }
    __syncthreads();
    if (tid < 32) {
      const unsigned long long need = s.remaining;
      __syncwarp();  // every lane has read it before one of them writes it
      nucleus_find_rank(s.fine, need, s);
    }
    __syncthreads();
    prefix |= uint32_t(255 - s.rank) << shift;
    mask |= 0xffu << shift;
  }
  PrefixEnd e;
  e.key = prefix;
  e.weight = nucleus_weight(key_value(prefix), top);
  const unsigned long long rem = s.remaining;  // > 0, reached within this key's values: weight > 0
  e.taken = (rem + e.weight - 1) / e.weight;
  e.mass = target - rem + e.taken * e.weight;
  e.first_id = int(s.first_id[s.rank]);
  __syncthreads();  // s is reused by the next call
  return e;
}

// Block-wide: the id of the n-th (1-based, in id order) value whose order key is `key` (n <= their
// count). Warp w counts its own contiguous segment; the warp holding the n-th finds it.
__device__ __forceinline__ int nucleus_nth_with_key(const float* vals, int V, uint32_t key, int n, NucleusShared& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = int(blockDim.x) >> 5;
  const int seg = (div_up(V, warps) + 31) & ~31;
  const int begin = min(V, warp * seg), end = min(V, begin + seg);
  int hits = 0;
  for (int base = begin; base < end; base += 32) {
    const int i = base + lane;
    hits += __popc(__ballot_sync(kFullMask, i < end && order_key(__ldcg(vals + i)) == key));
  }
  if (lane == 0) s.warp_hits[warp] = hits;
  __syncthreads();
  int before = 0;
  for (int w = 0; w < warp; ++w) before += s.warp_hits[w];
  if (before < n && n <= before + hits) {  // warp-uniform: one warp
    int need = n - before;
    for (int base = begin; base < end; base += 32) {
      const int i = base + lane;
      unsigned m = __ballot_sync(kFullMask, i < end && order_key(__ldcg(vals + i)) == key);
      const int c = __popc(m);
      if (need <= c) {
        for (int k = 1; k < need; ++k) m &= m - 1;  // drop the lowest need - 1 hits
        if (lane == 0) s.chosen = base + __ffs(int(m)) - 1;
        break;
      }
      need -= c;
    }
  }
  __syncthreads();
  const int id = s.chosen;
  __syncthreads();
  return id;
}

struct NucleusRule {
  float top_p = 1.0f, min_p = 0.0f;
  uint64_t seed = 0, step = 0;
};

// Block-wide: the drawn id, in every thread. vals [V]: the transformed values (penalties, temperature;
// never NaN), written before the caller's last barrier or acquire (read through L2); top: their
// maximum; top_id: its lowest id (the answer when no value has a weight: every value -inf).
__device__ __forceinline__ int nucleus_draw(const float* vals, int V, float top, int top_id, const NucleusRule& r,
                                            NucleusShared& s, NucleusMember* members, int capacity) {
  if (!(top > -INFINITY && top < INFINITY)) return top_id;  // block-uniform
  const int tid = int(threadIdx.x), nt = int(blockDim.x);
  for (int i = tid; i < kNucleusBins; i += nt) s.coarse[i] = 0, s.coarse_n[i] = 0;
  if (tid == 0) s.total = 0, s.minp_mass = 0, s.members_bin = -1;
  __syncthreads();
  const double minp_floor = double(r.min_p) * kNucleusOne;
  unsigned long long total = 0, minp = 0;
  nucleus_for_each(vals, V, [&](int, float v) {
    const int b = nucleus_bin(v, top);
    atomicAdd(&s.coarse_n[b], 1u);  // every value: the member copy takes the whole bin
    const unsigned long long w = nucleus_weight(v, top);
    if (w == 0) return;
    atomicAdd(&s.coarse[b], w);
    total += w;
    if (double(w) >= minp_floor) minp += w;
  });
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    total += __shfl_xor_sync(kFullMask, total, o);
    minp += __shfl_xor_sync(kFullMask, minp, o);
  }
  if ((tid & 31) == 0) {
    atomicAdd(&s.total, total);
    atomicAdd(&s.minp_mass, minp);
  }
  __syncthreads();
  const unsigned long long all = s.total;  // >= 2^45: the top weighs that much
  unsigned long long kept = all;
  if (r.top_p < 1.0f) {
    const double want = ceil(double(r.top_p) * double(all));
    const unsigned long long target = want < 1.0 ? 1ull : want >= double(all) ? all : (unsigned long long)(want);
    kept = nucleus_prefix_end(vals, V, top, target, s, members, capacity).mass;
  }
  if (r.min_p > 0.0f && s.minp_mass < kept) kept = s.minp_mass;
  unsigned long long x = (unsigned long long)(uniform_at(r.seed, r.step, 0xffffffffu) * double(kept));
  if (x >= kept) x = kept - 1;  // u * kept may round up to kept
  const PrefixEnd e = nucleus_prefix_end(vals, V, top, x + 1, s, members, capacity);
  return e.taken == 1 ? e.first_id : nucleus_nth_with_key(vals, V, e.key, int(e.taken), s);
}

}  // namespace megaqwen::cuda

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
// more to copy the members (key, id) of the boundary bins into shared memory; the radix passes then
// run over those members alone. Both searches usually share that second read: the top-p cut's bin
// bounds the kept mass, so the draw's target, and when both bounds fall in one coarse bin (the usual
// case: the cut's bin holds little of the mass) the draw's bin is known before the cut is and its
// members are copied in the same read. Otherwise the draw copies its bin in a third read; a bin larger
// than the caller's member buffer is searched over all V values instead (four more reads). Each read
// keeps four 16-byte loads in flight per thread: a single SM reading 0.6 MB from L2 is latency-bound
// otherwise. The 64-bit masses are added as two native 32-bit shared atomics with the carry taken
// from the low word's old value: a 64-bit shared atomicAdd compiles to a compare-and-swap loop whose
// lanes retry per shared-memory bank, ~150k of them per draw. Against the CPU Sampler: the same kept
// set and draw law, except where a running mass lands within ~1e-7 of a cut (fp32 exp here, fp64
// there) and for the tail below 2^-46.
#pragma once

#include <climits>

#include "megaqwen/cuda/kernels.h"  // kNucleusMaxVocab
#include "megaqwen/cuda/kernels/common.cuh"

namespace megaqwen::cuda {

constexpr int kNucleusBins = 256;
constexpr float kNucleusBinsPerLogit = 8.0f;  // coarse bin width: 1/8 of a (transformed) logit
constexpr float kNucleusOne = 0x1p45f;        // the top value's weight

// A member of a boundary bin, copied to shared memory for the radix passes.
struct NucleusMember {
  uint32_t key;
  int32_t id;
};

// Members [begin, begin + n) of the buffer are those of coarse bins first..last (first > last: the
// region is unused).
struct NucleusRegion {
  int first, last, begin, n;
  __device__ __forceinline__ bool holds(int bin) const { return first <= bin && bin <= last; }
};

// Shared scratch (about 6.4 KB); the caller provides it and a member buffer (the megakernel: its
// vector region).
struct NucleusShared {
  unsigned long long coarse[kNucleusBins];  // mass per coarse bin; bin 0 holds the top
  uint32_t coarse_n[kNucleusBins];          // values per coarse bin
  unsigned long long fine[kNucleusBins];    // mass per key byte of a radix pass; slot 0 the largest byte
  uint32_t first_id[kNucleusBins];          // lowest id per slot (last radix pass: one key per slot)
  unsigned long long total, minp_mass, remaining;
  int rank;
  NucleusRegion region[2];  // what the member buffer holds: two disjoint ranges of coarse bins
  int plan_bin[3];          // nucleus_draw's plan: the top-p cut's bin, the draw's lowest and highest
  unsigned long long plan_remaining;
  int warp_hits[32];
  int chosen;
  int value_reads;  // full reads of the V values so far (the draw's cost, checked by tests)
};

// *a += v for a 64-bit word in shared memory, as two native 32-bit atomics (a 64-bit shared atomicAdd
// is a compare-and-swap loop): the low word's old value says whether this add carried into the high
// word. The word is exact once every add is done, in any order.
__device__ __forceinline__ void shared_add_u64(unsigned long long* a, unsigned long long v) {
  uint32_t* word = reinterpret_cast<uint32_t*>(a);  // little-endian: word[0] is the low half
  const uint32_t lo = uint32_t(v), hi = uint32_t(v >> 32);
  const uint32_t old = atomicAdd(word, lo);
  const uint32_t carry = old + lo < old ? 1u : 0u;
  if (hi + carry != 0) atomicAdd(word + 1, hi + carry);
}

// round(expf(v - top) * 2^45): the product is exact in fp32 (a power of two, no overflow for v <= top),
// so no double arithmetic is needed; below 2^-46 of the top's weight it rounds to 0.
__device__ __forceinline__ unsigned long long nucleus_weight(float v, float top) {
  return __float2ull_rn(expf(v - top) * kNucleusOne);
}

// Coarse bin of v (<= top): non-decreasing as v falls, so bins follow the sorted order; -inf goes last.
__device__ __forceinline__ int nucleus_bin(float v, float top) {
  const float d = (top - v) * kNucleusBinsPerLogit;
  return d < float(kNucleusBins - 1) ? int(d) : kNucleusBins - 1;
}

// Block-wide: f(i, vals[i]) for every i < V, once each, from some thread (no order: every use sums
// integers or takes a minimum). Four 16-byte loads in flight per thread when vals is 16-byte aligned.
// Counts one read in s.value_reads.
template <class F>
__device__ __forceinline__ void nucleus_for_each(const float* vals, int V, NucleusShared& s, F&& f) {
  const int tid = int(threadIdx.x), nt = int(blockDim.x);
  if (tid == 0) ++s.value_reads;  // read after a later barrier
  int done = 0;
  if ((reinterpret_cast<uintptr_t>(vals) & 15u) == 0) {
    const int n4 = V / 4;
    const float4* v4 = reinterpret_cast<const float4*>(vals);
    int j = tid;
    for (; j + 3 * nt < n4; j += 4 * nt) {
      float4 a[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) a[u] = __ldcg(v4 + j + u * nt);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int i = 4 * (j + u * nt);
        f(i, a[u].x), f(i + 1, a[u].y), f(i + 2, a[u].z), f(i + 3, a[u].w);
      }
    }
    for (; j < n4; j += nt) {
      const float4 a = __ldcg(v4 + j);
      f(4 * j, a.x), f(4 * j + 1, a.y), f(4 * j + 2, a.z), f(4 * j + 3, a.w);
    }
    done = 4 * n4;
  }
  for (int i = done + tid; i < V; i += nt) f(i, __ldcg(vals + i));
}

// Warp 0 (all 32 lanes): the first slot b of hist (in rank order) where hist[0] + ... + hist[b]
// reaches need (1 <= need <= their sum): rank = b, remaining = need - (hist[0] + ... + hist[b-1]),
// written by one lane (the others read them after a __syncwarp or a barrier).
__device__ __forceinline__ void nucleus_find_rank(const unsigned long long* hist, unsigned long long need, int& rank,
                                                  unsigned long long& remaining) {
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
        rank = 8 * lane + b;
        remaining = need - cum;
        break;
      }
      cum += c[b];
    }
  }
}

// Values in coarse bins first..last (none when first > last).
__device__ __forceinline__ int nucleus_count(const NucleusShared& s, int first, int last) {
  int n = 0;
  for (int b = first; b <= last; ++b) n += int(s.coarse_n[b]);
  return n;
}

// Block-wide, one read of the values: copies the members of coarse bins a_first..a_last into region 0
// and those of b_first..b_last into region 1 (disjoint ranges; first > last: none), replacing what the
// buffer held. The caller checks that they fit.
__device__ __forceinline__ void nucleus_copy_members(const float* vals, int V, float top, int a_first, int a_last,
                                                     int b_first, int b_last, NucleusShared& s,
                                                     NucleusMember* members) {
  const NucleusRegion a{a_first, a_last, 0, 0}, b{b_first, b_last, nucleus_count(s, a_first, a_last), 0};
  __syncthreads();  // every thread is done with the regions the buffer held
  if (threadIdx.x == 0) s.region[0] = a, s.region[1] = b;
  __syncthreads();
  nucleus_for_each(vals, V, s, [&](int i, float v) {
    const int bin = nucleus_bin(v, top);
    if (a.holds(bin)) {
      members[atomicAdd(&s.region[0].n, 1)] = NucleusMember{order_key(v), i};
    } else if (b.holds(bin)) {
      members[b.begin + atomicAdd(&s.region[1].n, 1)] = NucleusMember{order_key(v), i};
    }
  });
  __syncthreads();
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
// s.coarse_n must hold the coarse histogram (nucleus_draw's first read). The boundary bin's members
// are searched in the buffer (copied there now unless a region holds them already) when they fit in
// `capacity` (0: always search over all V). Every thread gets the result.
__device__ __forceinline__ PrefixEnd nucleus_prefix_end(const float* vals, int V, float top, unsigned long long target,
                                                        NucleusShared& s, NucleusMember* members, int capacity) {
  const int tid = int(threadIdx.x), nt = int(blockDim.x);
  if (tid < 32) nucleus_find_rank(s.coarse, target, s.rank, s.remaining);
  __syncthreads();
  const int bin = s.rank;
  int region = s.region[0].holds(bin) ? 0 : s.region[1].holds(bin) ? 1 : -1;  // block-uniform
  if (region < 0 && int(s.coarse_n[bin]) <= capacity) {
    nucleus_copy_members(vals, V, top, bin, bin, 0, -1, s, members);
    region = 0;
  }
  const bool compact = region >= 0;
  const int begin = compact ? s.region[region].begin : 0, n = compact ? s.region[region].n : 0;
  uint32_t prefix = 0, mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < kNucleusBins; i += nt) s.fine[i] = 0, s.first_id[i] = UINT_MAX;
    __syncthreads();
    auto visit = [&](uint32_t key, int i) {
      if ((key & mask) != prefix) return;
      const int slot = 255 - int((key >> shift) & 255u);
      shared_add_u64(&s.fine[slot], nucleus_weight(key_value(key), top));
      if (shift == 0) atomicMin(&s.first_id[slot], uint32_t(i));
    };
    if (compact) {
      for (int j = begin + tid; j < begin + n; j += nt) {
        const NucleusMember m = members[j];
        if (nucleus_bin(key_value(m.key), top) == bin) visit(m.key, m.id);  // the region may hold more bins
      }
    } else {
      nucleus_for_each(vals, V, s, [&](int i, float v) {
        if (nucleus_bin(v, top) == bin) visit(order_key(v), i);
      });
    }
    __syncthreads();
    if (tid < 32) {
      const unsigned long long need = s.remaining;
      __syncwarp();  // every lane has read it before one of them writes it
      nucleus_find_rank(s.fine, need, s.rank, s.remaining);
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
  if (threadIdx.x == 0) ++s.value_reads;
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

// The draw's target for a kept mass: r = floor(u * kept) (at most kept - 1: u * kept may round up to
// kept), and the drawn id ends the shortest prefix whose mass reaches r + 1. Non-decreasing in kept.
__host__ __device__ __forceinline__ unsigned long long nucleus_draw_target(double u, unsigned long long kept) {
  unsigned long long x = (unsigned long long)(u * double(kept));
  if (x >= kept) x = kept - 1;
  return x + 1;
}

// Block-wide: the drawn id, in every thread. vals [V]: the transformed values (penalties, temperature;
// never NaN), written before the caller's last barrier or acquire (read through L2); top: their
// maximum; top_id: its lowest id (the answer when no value has a weight: every value -inf).
__device__ __forceinline__ int nucleus_draw(const float* vals, int V, float top, int top_id, const NucleusRule& r,
                                            NucleusShared& s, NucleusMember* members, int capacity) {
  if (!(top > -INFINITY && top < INFINITY)) return top_id;  // block-uniform
  const int tid = int(threadIdx.x), nt = int(blockDim.x);
  for (int i = tid; i < kNucleusBins; i += nt) s.coarse[i] = 0, s.coarse_n[i] = 0;
  if (tid == 0) {
    s.total = 0, s.minp_mass = 0, s.value_reads = 0;
    s.region[0] = s.region[1] = NucleusRegion{0, -1, 0, 0};  // empty
  }
  __syncthreads();
  // p_i >= min_p * p_top, in weights: w >= min_p * 2^45, i.e. w >= its ceiling (w is an integer).
  const double minp_ceil = ceil(double(r.min_p) * double(kNucleusOne));
  const unsigned long long minp_floor = minp_ceil > 0.0 ? (unsigned long long)(minp_ceil) : 0ull;
  unsigned long long total = 0, minp = 0;
  nucleus_for_each(vals, V, s, [&](int, float v) {
    const int b = nucleus_bin(v, top);
    atomicAdd(&s.coarse_n[b], 1u);  // every value: the member copy takes the whole bin
    const unsigned long long w = nucleus_weight(v, top);
    if (w == 0) return;
    shared_add_u64(&s.coarse[b], w);
    total += w;
    if (w >= minp_floor) minp += w;
  });
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    total += __shfl_xor_sync(kFullMask, total, o);
    minp += __shfl_xor_sync(kFullMask, minp, o);
  }
  if ((tid & 31) == 0) {
    shared_add_u64(&s.total, total);
    shared_add_u64(&s.minp_mass, minp);
  }
  __syncthreads();
  const unsigned long long all = s.total, minp_mass = s.minp_mass;  // all >= 2^45: the top weighs that much
  const bool cut_p = r.top_p < 1.0f, cut_min = r.min_p > 0.0f;
  unsigned long long p_target = all;
  if (cut_p) {
    const double want = ceil(double(r.top_p) * double(all));
    p_target = want < 1.0 ? 1ull : want >= double(all) ? all : (unsigned long long)(want);
  }
  const double u = uniform_at(r.seed, r.step, 0xffffffffu);
  // The plan, by warp 0: the top-p cut's coarse bin bounds the kept mass (the cut's prefix ends in
  // that bin), and so the draw's target, whose bin then lies in a short range (usually one bin, at
  // most a few), known now: one read copies the members of the cut's bin and of that range.
  if (tid < 32) {
    unsigned long long lo = all, hi = all;
    if (cut_p) {
      nucleus_find_rank(s.coarse, p_target, s.plan_bin[0], s.plan_remaining);
      __syncwarp();
      lo = p_target;
      hi = p_target - s.plan_remaining + s.coarse[s.plan_bin[0]];
    }
    if (cut_min) lo = min(lo, minp_mass), hi = min(hi, minp_mass);
    unsigned long long unused;
    nucleus_find_rank(s.coarse, nucleus_draw_target(u, lo), s.plan_bin[1], unused);
    nucleus_find_rank(s.coarse, nucleus_draw_target(u, hi), s.plan_bin[2], unused);
  }
  __syncthreads();
  {
    // a: the cut's bin; b: the draw's range below it (the draw's target never passes the kept mass).
    int a_first = 0, a_last = -1, b_first = s.plan_bin[1], b_last = s.plan_bin[2];
    if (cut_p) {
      const int p_bin = s.plan_bin[0];
      if (int(s.coarse_n[p_bin]) <= capacity) a_first = a_last = p_bin;
      b_last = min(b_last, p_bin - 1);
    }
    const int a_n = nucleus_count(s, a_first, a_last);
    if (a_n + nucleus_count(s, b_first, b_last) > capacity) b_first = 0, b_last = -1;
    if (a_first <= a_last || b_first <= b_last)
      nucleus_copy_members(vals, V, top, a_first, a_last, b_first, b_last, s, members);
  }
  unsigned long long kept = all;
  if (cut_p) kept = nucleus_prefix_end(vals, V, top, p_target, s, members, capacity).mass;
  if (cut_min && minp_mass < kept) kept = minp_mass;
  const PrefixEnd e = nucleus_prefix_end(vals, V, top, nucleus_draw_target(u, kept), s, members, capacity);
  return e.taken == 1 ? e.first_id : nucleus_nth_with_key(vals, V, e.key, int(e.taken), s);
}

}  // namespace megaqwen::cuda

// Log-probabilities of a step's raw logits on the device, as a two-level reduction shaped like the
// token selection (select.cuh), so the megakernel reports them without the logits leaving the GPU:
//   level 1 (every CTA, over its vocabulary slice): the slice's log-sum-exp part (max m, sum of
//            exp(x - m)) and, with top > 0, its best `top` raw logits (cta_top_k)
//   level 2 (the selecting CTA, after every part is in): log Z = M + log(sum of s_c exp(m_c - M)),
//            the drawn token's x - log Z, and the best `top` of the ctas x top candidates
//            (merge_top_k), sorted, each minus log Z: a LogprobRecord (layout.h)
// The same numbers as the host's token_logprob() (sampling/logprobs.h) on the same logits up to float
// rounding of the sums (~1e-6); ties go to the lowest id, as there. -inf and NaN logits weigh nothing.
// The megakernel's LM head stage runs both levels (stage_lm_head.cuh); token_logprobs_kernel
// (megakernel.cu) runs them alone for the per-operator path and the tests.
#pragma once

#include "megaqwen/cuda/megakernel/select.cuh"

namespace megaqwen::cuda::mk {

// (m, s) stands for s * exp(m): two parts of a sum of exponentials, merged.
__device__ __forceinline__ void lse_merge(float& m, float& s, float om, float os) {
  if (om > m) {
    const float t = m;
    m = om, om = t;
    const float u = s;
    s = os, os = u;
  }
  if (om > -INFINITY) s += os * expf(om - m);
}

__device__ __forceinline__ void warp_lse(float& m, float& s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(kFullMask, m, o), os = __shfl_xor_sync(kFullMask, s, o);
    lse_merge(m, s, om, os);
  }
}

// Block-wide merge of every thread's (m, s) in a fixed order; thread 0 returns the block's. red: 64 floats.
__device__ __forceinline__ void block_lse(float& m, float& s, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_lse(m, s);
  __syncthreads();
  if (lane == 0) red[warp] = m, red[32 + warp] = s;
  __syncthreads();
  if (warp == 0) {
    m = lane < kWarps ? red[lane] : -INFINITY;
    s = lane < kWarps ? red[32 + lane] : 0.0f;
    warp_lse(m, s);
  }
}

// Level 1, block-wide: raw[begin, end) (this launch's values: read through L2, written by this CTA's
// threads before a __syncthreads or by earlier work) -> parts.lse[2 cta ..], and with top > 0 the
// slice's best `top` candidates (cta_top_k). Starts with __syncthreads (red and s are reused).
__device__ __forceinline__ void cta_logprob_part(const float* raw, int begin, int end, int top, int cta,
                                                 const LogprobParts& parts, float* red, TopKShared& s) {
  float m = -INFINITY, sum = 0.0f;
  for (int i = begin + int(threadIdx.x); i < end; i += kThreads) {
    const float x = __ldcg(raw + i);
    if (!(x > -INFINITY)) continue;  // -inf and NaN: no weight
    if (x > m) {
      sum = sum * expf(m - x) + 1.0f;
      m = x;
    } else {
      sum += expf(x - m);
    }
  }
  __syncthreads();
  block_lse(m, sum, red);
  if (threadIdx.x == 0) {
    __stcg(parts.lse + 2 * cta, m);
    __stcg(parts.lse + 2 * cta + 1, sum);
  }
  if (top > 0) {
    __syncthreads();
    cta_top_k(raw, begin, end, top, cta, parts.cand_v, parts.cand_i, parts.cand_n, s);
  }
}

// Level 2, block-wide, by the CTA that saw every part: log Z into *log_z (shared), and with top > 0
// the best min(top, V) raw logits in s.cand_v / s.cand_i, best first. Ends with __syncthreads.
__device__ __forceinline__ void merge_logprob_parts(const LogprobParts& parts, int ctas, int top, int V, float* red,
                                                    float* log_z, TopKShared& s) {
  float m = -INFINITY, sum = 0.0f;
  for (int b = threadIdx.x; b < ctas; b += kThreads) lse_merge(m, sum, __ldcg(parts.lse + 2 * b), __ldcg(parts.lse + 2 * b + 1));
  block_lse(m, sum, red);
  if (threadIdx.x == 0) *log_z = m + logf(sum);  // every logit -inf: -inf (no finite log-probability)
  __syncthreads();
  if (top > 0) merge_top_k(parts.cand_v, parts.cand_i, parts.cand_n, ctas, min(top, V), s);
}

// Writes the record of `token` (threads 0..kMaxLogprobTop - 1 store, each its own fields) from the
// merged parts. `rec` may be mapped host memory: the caller orders these stores before the token's
// own (a __threadfence_system by each writer).
__device__ __forceinline__ void write_logprob_record(const float* raw, int token, int top, int V, float log_z,
                                                     const TopKShared& s, LogprobRecord* rec) {
  const int tid = threadIdx.x, n = min(top, V);
  if (tid == 0) {
    rec->logprob = token >= 0 && token < V ? __ldcg(raw + token) - log_z : NAN;
    rec->n = n;
  }
  if (tid < n) {
    rec->ids[tid] = s.cand_i[tid];
    rec->logprobs[tid] = s.cand_v[tid] - log_z;
  }
}

// The megakernel's LM head stage calls the two levels through these, out of line: scoring runs for
// logprob requests only, and inlined it would take registers from the kernel's hot loops (ptxas
// showed more spilling in the 4B and 0.8B configs). `inline` keeps one definition per program.
__device__ inline __noinline__ void cta_logprob_part_call(const float* raw, int begin, int end, int top, int cta,
                                                          const LogprobParts& parts, float* red, TopKShared& s) {
  cta_logprob_part(raw, begin, end, top, cta, parts, red, s);
}
__device__ inline __noinline__ void score_token_call(const float* raw, int token, int top, int V, int ctas,
                                                     const LogprobParts& parts, float* red, float* log_z,
                                                     TopKShared& s, LogprobRecord* rec) {
  merge_logprob_parts(parts, ctas, top, V, red, log_z, s);
  write_logprob_record(raw, token, top, V, *log_z, s, rec);
}

// The reduction alone over given logits (token_logprobs_kernel): block b owns the ids
// [b * ceil(V / blocks), ...); the last block to take the ticket merges and writes a.out. `ticket()`
// (thread 0) returns the old value of an acq_rel add of 1 to a.ticket. Block-wide.
template <class Ticket>
__device__ __forceinline__ void logprobs_over_logits(const LogprobArgs& a, float* red, int& last, float& log_z,
                                                     TopKShared& s, Ticket ticket) {
  const int blocks = int(gridDim.x), b = int(blockIdx.x);
  const int per = (a.V + blocks - 1) / blocks;
  const int begin = min(a.V, b * per), end = min(a.V, begin + per);
  cta_logprob_part(a.logits, begin, end, a.top, b, a.parts, red, s);
  __syncthreads();
  if (threadIdx.x == 0) last = ticket() == uint32_t(blocks) - 1u;
  __syncthreads();
  if (!last) return;
  merge_logprob_parts(a.parts, blocks, a.top, a.V, red, &log_z, s);
  write_logprob_record(a.logits, __ldcg(a.token), a.top, a.V, log_z, s, a.out);
}

}  // namespace megaqwen::cuda::mk

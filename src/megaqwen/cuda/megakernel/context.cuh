// What every stage of the megakernel sees: the parameters, this CTA's place, the token being
// decoded, shared-memory regions, the schedule and the weight stream; plus the two compute helpers
// all stages share: the redundant RMSNorm into shared memory and the matrix-vector product of one
// weight chunk (bf16 rows in shared memory) with an fp32 vector in shared memory.
#pragma once

#include <type_traits>

#include "megaqwen/cuda/kernels/common.cuh"
#include "megaqwen/cuda/megakernel/fixed_sum.cuh"
#include "megaqwen/cuda/megakernel/stream.cuh"
#include "megaqwen/cuda/megakernel/sync.cuh"

namespace megaqwen::cuda::mk {

constexpr int kFlagWaitForm = 15;  // Ctx::flags slot: Params::ablate | kSkipWait under kProbeNoWaits

template <class C>
struct Ctx {
  const Params& p;
  int cta, ctas;
  int t = 0;      // token index inside the launch (the epoch every counter target scales with)
  int pos = 0;    // position of the token being fed
  int token = 0;  // the token being fed
  CounterLayout lay;
  Schedule<C>* sched;  // shared memory
  WeightStream<C> stream;
  float* vec;     // C::kScratchFloats of shared memory: the stage's input vector, or attention scratch
  float* red;     // 64 floats of shared memory for block reductions
  int* flags;     // 16 ints of shared memory for block-uniform decisions (flags[kFlagWaitForm]: below)

  __device__ Ctx(const Params& params) : p(params), cta(int(blockIdx.x)), ctas(int(gridDim.x)) {
    lay.layers = C::L;
    lay.kv_heads = C::GROUPS;
  }
  __device__ uint32_t* counter(Counter c, int l = 0, int g = 0) const { return p.counters + lay.word(c, l, g); }
  // Every CTA adds 1 per token to the all-CTA counters: this is the target for token t.
  __device__ uint32_t all_ctas() const { return uint32_t(ctas) * uint32_t(t + 1); }
  __device__ const Part& part(Mat m) const { return sched->part[int(m)]; }
  // Block-wide: a stage waits for its input counter to reach target (sync.cuh, wait_at_least). The
  // timing probe kProbeNoWaits skips the wait, keeping the barrier that ends it. The form (ablate bits
  // and kSkipWait) comes from shared memory, set once at the start: computed from Params at each wait,
  // it cost the Qwen3.5-0.8B instantiation 48 more bytes of spill loads in the attention stage.
  __device__ void wait_input(const uint32_t* ctr, uint32_t target) const {
    wait_at_least(ctr, target, uint32_t(flags[kFlagWaitForm]));
  }
  // Whether stage C merges this token's attention splits itself (layout.h, merge_in_o_proj): the same
  // answer on every CTA, from the position alone. Not in the Qwen3.5 hybrids: with it compiled in,
  // ptxas spilled 3x more in the 0.8B instantiation (580 against 200 bytes of spill loads, moved into
  // the RMSNorm and vector-load loops every stage runs), for 6 attention layers of 24.
  __device__ bool o_proj_merges() const {
    if constexpr (C::kHybrid) return false;
    else return !(p.ablate & kAblateSplitMerge) && merge_in_o_proj(pos + 1, p.splits, p.merge_splits);
  }

  // The vectors every CTA reads whole (x, xmid, act) as flagged words (layout.h, Params::x_words):
  // a reader polls the data for this token's epoch instead of an all-CTA counter.
  __device__ bool flagged() const { return p.x_words != nullptr; }
  __device__ uint32_t epoch() const { return uint32_t(t) + 1u; }  // 0: the words zeroed at launch
  // qkv as flagged words too (Qwen3 configs only: Params::qkv_words).
  __device__ bool flagged_qkv() const {
    if constexpr (C::kHybrid) return false;
    else return p.qkv_words != nullptr;
  }

  // The one-stage MLP (layout.h, Params::x_fixed): stage D adds its down products into a fixed-point
  // sum itself, and x[l + 1] is xmid[l] plus that sum.
  __device__ bool one_stage_mlp() const { return p.x_fixed != nullptr; }
  // Whether x (the residual entering a layer) is a vector of flagged words its readers poll: with the
  // one-stage MLP it is not (a sum of atomics carries no epoch; its readers wait on DownDone).
  __device__ bool x_flagged() const { return flagged() && !one_stage_mlp(); }
  // The one-stage MLP's sum for the residual entering layer l (l >= 1: layer l - 1's down products),
  // in token t's parity half (layout.h, Params::x_fixed).
  __device__ unsigned long long* mlp_sum(int l) const {
    return p.x_fixed + (size_t(t & 1) * (C::L + 1) + size_t(l)) * C::H;
  }
  // The one-stage MLP: this CTA's share of the other parity half, zeroed for token t + 1. Its sums were
  // last read in token t - 1, whose reads all precede Step = t; these stores precede this CTA's LM-head
  // ticket, so Step = t + 1, and with it every add of token t + 1. Stores only: no barrier needed.
  __device__ void clear_next_mlp_sums() const {
    unsigned long long* next = p.x_fixed + size_t((t + 1) & 1) * (C::L + 1) * C::H + C::H;  // rows 1..L
    for (int i = cta * kThreads + int(threadIdx.x); i < C::L * C::H; i += ctas * kThreads) __stcg(next + i, 0ull);
  }

  // Residual stream entering layer l (l = L: the final norm's input), element i: the token's
  // embedding row for l = 0 (never copied), else x[l] written by stage E of layer l - 1 in this
  // launch (read through L2), or with the one-stage MLP xmid[l - 1] plus the fixed-point sum of
  // layer l - 1's down products (one fp32 add, the same in any order of the sum's adds).
  __device__ float residual(int l, int i) const {
    if (l == 0) return __uint_as_float(uint32_t(__ldg(reinterpret_cast<const unsigned short*>(p.embed) + size_t(token) * C::H + i)) << 16);
    if (one_stage_mlp()) return xmid_at(l - 1, i) + from_fixed(__ldcg(mlp_sum(l) + i));
    if (flagged()) return load_flagged_value(p.x_words + size_t(l) * C::H + i, epoch());
    return __ldcg(p.x + size_t(l) * C::H + i);
  }
  __device__ float xmid_at(int l, int i) const {
    if (flagged()) return load_flagged_value(p.xmid_words + size_t(l) * C::H + i, epoch());
    return __ldcg(p.xmid + size_t(l) * C::H + i);
  }
  // The stores of x[l] (stage E of layer l - 1), xmid[l] (C) and act[l] (D), element i.
  __device__ void store_x(int l, int i, float v) const {
    if (flagged()) store_flagged(p.x_words + size_t(l) * C::H + i, v, epoch());
    else __stcg(p.x + size_t(l) * C::H + i, v);
  }
  __device__ void store_xmid(int l, int i, float v) const {
    if (flagged()) store_flagged(p.xmid_words + size_t(l) * C::H + i, v, epoch());
    else __stcg(p.xmid + size_t(l) * C::H + i, v);
  }
  __device__ void store_qkv(int l, int i, float v) const {
    if (flagged_qkv()) store_flagged(p.qkv_words + size_t(l) * C::kQkvRowFloats + i, v, epoch());
    else __stcg(p.qkv + size_t(l) * C::kQkvRowFloats + i, v);
  }
  __device__ void store_act(int l, int i, float v) const {
    if (flagged()) store_flagged(p.act_words + size_t(l) * C::I + i, v, epoch());
    else __stcg(p.act + size_t(l) * C::I + i, v);
  }
  // Stages C, D and E end here: every CTA adds 1 to the all-CTA counter its readers wait on. With
  // flagged vectors nobody waits on it (the data carries its epoch), so only the barrier stays: the
  // next stage overwrites the shared memory this one read.
  __device__ void signal_all_ctas(Counter counter_id, int l) const {
    if (flagged()) __syncthreads();
    else signal_add(counter(counter_id, l), 1u, p.ablate);
  }
};

// out[i] = w[i] * (src(i) * rsqrt(mean(src^2) + eps)) for i < N, in the CPU reference's order;
// every CTA computes the whole vector itself (no edge to wait on). Ends with __syncthreads. The
// weights are asked into L1 first (prefetch_l1), so that their round trip runs beside the block
// reduction instead of after it, on the path to the stage's products. (Held in registers instead,
// they made ptxas spill 3-6x more in the 4B and Qwen3.5-0.8B configs.)
template <int N, class Src>
__device__ __forceinline__ void rms_norm_to_smem(Src src, const float* __restrict__ w, float eps, float* out, float* red) {
  for (int i = threadIdx.x; i < N; i += kThreads) prefetch_l1(w + i);
  float ss = 0.0f;
  for (int i = threadIdx.x; i < N; i += kThreads) {
    const float v = src(i);
    out[i] = v;
    ss += v * v;
  }
  ss = block_sum(ss, red);
  const float scale = 1.0f / sqrtf(ss / float(N) + eps);
  for (int i = threadIdx.x; i < N; i += kThreads) out[i] = __ldg(w + i) * (out[i] * scale);
  __syncthreads();
}

// Block-wide copy of n floats produced in this launch (global, read through L2) into shared memory.
__device__ __forceinline__ void load_vec(const float* src, int n, float* out) {
  const float4* s4 = reinterpret_cast<const float4*>(src);
  float4* o4 = reinterpret_cast<float4*>(out);
  for (int i = threadIdx.x; i < n / 4; i += kThreads) o4[i] = __ldcg(s4 + i);
  __syncthreads();
}

// What a stage's epilogue adds to its rows' products (the residual), loaded by lane 0 before the
// products so that its L2 (or HBM) round trip runs beside them instead of after them, on the path to
// the stage's signal. NoResidual: nothing to load.
struct NoResidual {
  __device__ float2 operator()(int, bool) const { return make_float2(0.0f, 0.0f); }
};

// rows x K bf16 weight rows in shared memory (a chunk) times vec [K] fp32 in shared memory. Warp w
// takes row pairs (2w, 2w + 1), (2w + 2 kWarps, ...): both rows share each vector load (a gate/up
// pair lands in one warp). Each lane reads 16 bytes of each row per step (a warp: 512 contiguous
// bytes, conflict-free); fp32 sums in a fixed order (bit-reproducible for a given CTA count).
// epi(r, a0, a1, has1) runs on lane 0 for rows r and r + 1 (a1 meaningless when !has1); with a
// residual (res(r, has1): the values for rows r and r + 1, loaded by lane 0 before the products),
// epi(r, a0 + res.x, a1 + res.y, has1).
template <int K, class Epi, class Res = NoResidual>
__device__ __forceinline__ void matvec_chunk(const uint8_t* chunk, int rows, const float* vec, Epi&& epi, Res&& res = {}) {
  constexpr int K8 = K / 8;
  constexpr bool kResidual = !std::is_same_v<std::decay_t<Res>, NoResidual>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint4* w = reinterpret_cast<const uint4*>(chunk);
  const float4* v4 = reinterpret_cast<const float4*>(vec);
  for (int r = 2 * warp; r < rows; r += 2 * kWarps) {
    const bool has1 = r + 1 < rows;
    float2 base = make_float2(0.0f, 0.0f);
    if constexpr (kResidual) {
      if (lane == 0) base = res(r, has1);
    }
    const uint4* w0 = w + size_t(r) * K8;
    const uint4* w1 = has1 ? w0 + K8 : w0;
    float a0 = 0.0f, a1 = 0.0f;
#pragma unroll 4
    for (int k = lane; k < K8; k += 32) {
      const uint4 u0 = w0[k], u1 = w1[k];
      const float4 xa = v4[2 * k], xb = v4[2 * k + 1];
      const float xs[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
      float f0[8], f1[8];
      unpack_bf16x8(u0, f0);
      unpack_bf16x8(u1, f1);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        a0 = fmaf(f0[j], xs[j], a0);
        a1 = fmaf(f1[j], xs[j], a1);
      }
    }
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
    if constexpr (kResidual) {
      if (lane == 0) epi(r, base.x + a0, base.y + a1, has1);
    } else {
      if (lane == 0) epi(r, a0, a1, has1);
    }
  }
}

// Streams every chunk of matrix m (this CTA's rows of it) through matvec_chunk; epi (and res, the
// residual: matvec_chunk) get the row index within the whole matrix. The last chunk's refill is
// deferred: the caller signals its counter, then calls c.stream.flush().
template <int K, class C, class Epi, class Res = NoResidual>
__device__ __forceinline__ void stream_rows(Ctx<C>& c, Mat m, const float* vec, Epi&& epi, Res&& res = {}) {
  const Part& pt = c.part(m);
  for (int j = 0; j < pt.chunks; ++j) {
    const int row = pt.row0 + j * pt.chunk_rows;
    const int rows = min(pt.chunk_rows, pt.row0 + pt.rows - row);
    const uint8_t* chunk = c.stream.wait();
    if constexpr (std::is_same_v<std::decay_t<Res>, NoResidual>) {
      matvec_chunk<K>(chunk, rows, vec, [&](int r, float a0, float a1, bool has1) { epi(row + r, a0, a1, has1); });
    } else {
      matvec_chunk<K>(
          chunk, rows, vec, [&](int r, float a0, float a1, bool has1) { epi(row + r, a0, a1, has1); },
          [&](int r, bool has1) { return res(row + r, has1); });
    }
    if (j == pt.chunks - 1 && !(c.p.ablate & kAblateDeferredRefill)) c.stream.release_deferred();
    else c.stream.release();
  }
}

// Stages C and C': this CTA's rows of the mixer's output projection m (K wide) times vec, plus the
// residual entering layer l (loaded before the products), into xmid[l].
template <int K, class C>
__device__ __forceinline__ void project_into_xmid(Ctx<C>& c, Mat m, int l, const float* vec) {
  stream_rows<K>(
      c, m, vec,
      [&](int row, float x0, float x1, bool has1) {
        c.store_xmid(l, row, x0);
        if (has1) c.store_xmid(l, row + 1, x1);
      },
      [&](int row, bool has1) { return make_float2(c.residual(l, row), has1 ? c.residual(l, row + 1) : 0.0f); });
}

}  // namespace megaqwen::cuda::mk

// Stage B: QK-norm + RoPE on load, KV append, attention split over (kv head, chunk of positions),
// the log-sum-exp merge done by stage C's CTAs (few splits) or by the last split of each kv head to
// arrive (flash-decoding).
//   work:    item = (kv head g, split s), items kv_heads * splits over the CTAs (item i on CTA i mod
//            ctas); split s covers positions [s * chunk, min(n, (s + 1) * chunk)), n = pos + 1,
//            chunk = max(kMinAttnChunk, ceil(n / splits)) rounded up to 8
//   in:      qkv[l] rows of group g (raw q of heads gG..gG+G-1, k_g, v_g), q_norm, k_norm, inv_freq;
//            the cache rows of its positions (bf16 [pos, kv_heads, D]); both (all G) query heads of
//            the group are served by ONE read of each K/V row
//   out:     the split holding position n - 1 appends k_g, v_g (after QK-norm/RoPE, bf16) to the cache
//            first, then reads it back like every other row (the same bf16 values the per-operator
//            path attends to); partial (m, l, o) per (head, split); the merging split writes attn[l]
//   bytes:   KV cache 2 * n * D * 2 per kv head per layer (0.6B: 114,688 B per position over all
//            layers); partials G * (D + 2) * 4 per split
//   waits:   QkvReady[l][g] >= (t + 1) * (G + 2) * D (non-empty splits only); Qwen3 with flagged
//            vectors: polls the words of the group's rows it reads instead
//   signals: (Qwen3 with flagged vectors: the partials and the merged vector carry their epoch, so
//            AttnReady stays at 0 and AttnTicket counts the splits with relaxed adds or tickets)
//            when stage C merges (Ctx::o_proj_merges: few non-empty splits), every split adds 1 to
//            AttnReady[l] (release) and 1 to AttnTicket[l][g] (kept counting splits); otherwise each
//            split takes an AttnTicket[l][g] ticket (acq_rel) and the last one (ticket == (t + 1) *
//            splits - 1) merges and adds `splits` to AttnReady[l] (release): per token AttnReady[l]
//            grows by kv_heads * splits either way
// Inside a CTA: 32 half-warps each stream positions (16 lanes x 16 bytes = one 128-dim bf16 row),
// two positions per step so 4 row loads per lane are in flight, online softmax in the log2 domain;
// the two halves of a warp merge by shuffle, the 16 warps through shared memory.
#pragma once

#include "megaqwen/cuda/megakernel/context.cuh"

namespace megaqwen::cuda::mk {

// QK-norm + RoPE of one head held by a warp (lane owns elements lane + 32e): as
// kernels/rope_qknorm.cuh, so both paths produce the same values. R < D (Qwen3.5's partial rotary):
// the pairs (i, i + R/2) of the first R dims may sit in any two lanes, so the normed head goes
// through `row` (D floats of shared memory owned by this warp); dims R..D pass through.
template <int D, int R>
__device__ __forceinline__ void qk_norm_rope_warp(float v[D / 32], const float* __restrict__ w,
                                                  const float* __restrict__ inv_freq, int pos, float eps, float* row) {
  constexpr int E = D / 32;
  const int lane = threadIdx.x & 31;
  float ss = 0.0f;
#pragma unroll
  for (int e = 0; e < E; ++e) ss += v[e] * v[e];
  ss = warp_sum(ss);
  const float scale = 1.0f / sqrtf(ss / float(D) + eps);
#pragma unroll
  for (int e = 0; e < E; ++e) v[e] = __ldg(w + lane + 32 * e) * (v[e] * scale);
  if constexpr (R == D) {
#pragma unroll
    for (int e = 0; e < E / 2; ++e) {
      const int i = lane + 32 * e;
      const float angle = float(pos) * __ldg(inv_freq + i);
      float s, co;
      sincosf(angle, &s, &co);
      const float a = v[e], b = v[e + E / 2];
      v[e] = a * co - b * s;
      v[e + E / 2] = b * co + a * s;
    }
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) row[lane + 32 * e] = v[e];
    __syncwarp();
    constexpr int half = R / 2;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int i = lane + 32 * e;
      if (i >= R) continue;
      const int f = i < half ? i : i - half;  // the pair (f, f + half) and its frequency
      float s, co;
      sincosf(float(pos) * __ldg(inv_freq + f), &s, &co);
      const float a = row[f], b = row[f + half];
      v[e] = i < half ? a * co - b * s : b * co + a * s;
    }
    __syncwarp();  // the row is rewritten next (q scaled into it, or another head)
  }
}

// The log-sum-exp merge of the first `used` splits' partials (m, l, o) of one head, elements d..d+3:
// the maximum m, then sum(o * 2^(m - M)) / sum(l * 2^(m - M)) in split order (Qwen3.5: times
// sigmoid(gate)). Both mergers (the last split, stage C) call this: the same bits either way. Up to 4
// splits every load is issued before the first use (one L2 round trip); more take two per 4 splits.
// epoch > 0 (Qwen3 configs with flagged vectors): the partials are flagged words, polled for it.
// merge_splits4 over flagged partials (Qwen3 configs with flagged vectors, stage C merging): the same
// arithmetic (M over every used split first, then the splits in order), each word polled for `epoch`.
// Up to 4 splits in two round trips: splits 0 and 1 whole with the m of 2 and 3 (14 words), then the
// rest of 2 and 3 (10); more in pairs after a pass over the m words. (All 24 words at once made ptxas
// spill in every Qwen3 config; out of line, the call's saves and reloads spread through the kernel.)
template <int D>
__device__ __forceinline__ float4 merge_flagged_partials(const uint64_t* mlw, const uint64_t* pow, int used, uint32_t epoch) {
  float M = -INFINITY, L = 0.0f;
  float4 O = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  auto add = [&](uint64_t m, uint64_t l, const uint64_t* o) {
    const float ms = value_of(m);
    if (ms == -INFINITY) return;  // as merge_splits4's add
    const float wt = exp2f(ms - M);
    L = fmaf(value_of(l), wt, L);
    O = make_float4(fmaf(value_of(o[0]), wt, O.x), fmaf(value_of(o[1]), wt, O.y), fmaf(value_of(o[2]), wt, O.z),
                    fmaf(value_of(o[3]), wt, O.w));
  };
  // Word k of split s's (m, l, o[4]).
  auto word = [&](int s, int k) -> const uint64_t* { return k < 2 ? mlw + 2 * s + k : pow + size_t(s) * D + (k - 2); };
  if (used <= 4) {
    uint64_t a[14];
    load_flagged_each<14>([&](int j) -> const uint64_t* {
      const int s = j < 12 ? j / 6 : j - 10;
      return s >= used ? nullptr : j < 12 ? word(s, j % 6) : mlw + 2 * s;
    }, epoch, a);
    const uint64_t* m[4] = {a, a + 6, a + 12, a + 13};
#pragma unroll
    for (int s = 0; s < 4; ++s)
      if (s < used) M = fmaxf(M, value_of(*m[s]));
#pragma unroll
    for (int s = 0; s < 2; ++s)
      if (s < used) add(a[6 * s], a[6 * s + 1], a + 6 * s + 2);
    if (used > 2) {
      uint64_t b[10];  // splits 2 and 3: l, o[4]
      load_flagged_each<10>([&](int j) -> const uint64_t* {
        const int s = 2 + j / 5;
        return s >= used ? nullptr : word(s, 1 + j % 5);
      }, epoch, b);
#pragma unroll
      for (int s = 2; s < 4; ++s)
        if (s < used) add(*m[s], b[5 * (s - 2)], b + 5 * (s - 2) + 1);
    }
  } else {
    for (int s0 = 0; s0 < used; s0 += 8) {
      uint64_t w[8];
      load_flagged_each<8>([&](int j) { return s0 + j < used ? mlw + 2 * (s0 + j) : nullptr; }, epoch, w);
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (s0 + j < used) M = fmaxf(M, value_of(w[j]));
    }
    for (int s0 = 0; s0 < used; s0 += 2) {
      uint64_t w[12];
      load_flagged_each<12>([&](int j) -> const uint64_t* {
        const int s = s0 + j / 6;
        return s >= used ? nullptr : word(s, j % 6);
      }, epoch, w);
#pragma unroll
      for (int s = 0; s < 2; ++s)
        if (s0 + s < used) add(w[6 * s], w[6 * s + 1], w + 6 * s + 2);
    }
  }
  return make_float4(O.x / L, O.y / L, O.z / L, O.w / L);
}

template <class C>
__device__ __forceinline__ float4 merge_splits4(const Params& p, int l, int head, int d, int used, uint32_t epoch = 0) {
  constexpr int D = C::D, B = 4;
  const size_t slot0 = (size_t(l) * C::HEADS + head) * kMaxSplits;
  const float* ml = p.partial_ml + 2 * slot0;
  const float* po = p.partial_o + slot0 * D + d;
  float M = -INFINITY, L = 0.0f;
  float4 O = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  auto add = [&](float ms, float ls, float4 os) {
    if (ms == -INFINITY) return;  // an empty split (none among the used ones; kept for safety)
    const float wt = exp2f(ms - M);
    L = fmaf(ls, wt, L);
    O = make_float4(fmaf(os.x, wt, O.x), fmaf(os.y, wt, O.y), fmaf(os.z, wt, O.z), fmaf(os.w, wt, O.w));
  };
  if constexpr (!C::kHybrid) {
    if (epoch)
      return merge_flagged_partials<D>(p.partial_ml_words + 2 * slot0, p.partial_o_words + slot0 * D + d, used, epoch);
  }
  if (used <= B) {
    float ms[B], ls[B];
    float4 os[B];
#pragma unroll
    for (int s = 0; s < B; ++s) {
      ms[s] = s < used ? __ldcg(ml + 2 * s) : -INFINITY;
      ls[s] = s < used ? __ldcg(ml + 2 * s + 1) : 0.0f;
      os[s] = s < used ? __ldcg(reinterpret_cast<const float4*>(po + size_t(s) * D)) : O;
    }
#pragma unroll
    for (int s = 0; s < B; ++s) M = fmaxf(M, ms[s]);
#pragma unroll
    for (int s = 0; s < B; ++s) add(ms[s], ls[s], os[s]);
  } else {
    for (int s = 0; s < used; ++s) M = fmaxf(M, __ldcg(ml + 2 * s));
    for (int s = 0; s < used; ++s)
      add(__ldcg(ml + 2 * s), __ldcg(ml + 2 * s + 1), __ldcg(reinterpret_cast<const float4*>(po + size_t(s) * D)));
  }
  float4 out = make_float4(O.x / L, O.y / L, O.z / L, O.w / L);
  if constexpr (C::kHybrid) {  // the output gate, read from the projection's gate rows
    const float4 gate = __ldcg(reinterpret_cast<const float4*>(p.qkv + size_t(l) * C::kQkvRowFloats + C::Q + head * D + d));
    out.x *= 1.0f / (1.0f + expf(-gate.x));
    out.y *= 1.0f / (1.0f + expf(-gate.y));
    out.z *= 1.0f / (1.0f + expf(-gate.z));
    out.w *= 1.0f / (1.0f + expf(-gate.w));
  }
  return out;
}

template <class C>
__device__ void attention_item(Ctx<C>& c, int l, int g, int split) {
  constexpr int D = C::D, G = C::G, P = 8;  // P: dims per lane; LR lanes hold one cache row
  constexpr int LR = D / P, RPW = 32 / LR;    // 128: 16 lanes, 2 rows per warp; 256: 32, 1; 64: 8, 4
  constexpr int k0 = C::kHybrid ? 2 * C::Q : C::Q;  // the k rows (hybrid: after q and gate)
  const int n = c.pos + 1;
  const AttentionSplit range = attention_split(n, c.p.splits, split);
  const int begin = range.begin, end = range.end;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, grp = lane / LR, sub = lane % LR;
  const LayerWeights& w = c.p.layers[l];
  const bf16* kc = reinterpret_cast<const bf16*>(w.k_cache);
  const bf16* vc = reinterpret_cast<const bf16*>(w.v_cache);
  // Shared scratch (aliases the stage's vector region): per-warp partials, then q (and the k head's
  // rotation row when R < D).
  float* sm_o = c.vec;                                  // [kWarps][G][D]
  float* sm_m = sm_o + kWarps * G * D;                  // [kWarps][G]
  float* sm_l = sm_m + kWarps * G;                      // [kWarps][G]
  float* sm_q = sm_l + kWarps * G;                      // [G][D] (pre-scaled by log2(e)/sqrt(D)), [D] k row

  if (begin < end) {
    constexpr uint32_t group_rows = uint32_t((C::kHybrid ? 2 * G + 2 : G + 2) * D);
    if (!c.flagged_qkv()) c.wait_input(c.counter(Counter::QkvReady, l, g), uint32_t(c.t + 1) * group_rows);
    // Prologue: warps 0..G-1 normalize + rotate the group's q heads; warp G the k head (and, for the
    // split that holds the new position, appends k and v to the cache).
    const float* qkv = c.p.qkv + size_t(l) * C::kQkvRowFloats;
    auto load_row = [&](int at, float (&v)[D / 32]) {  // v[e] = qkv[at + lane + 32 e]
      if (c.flagged_qkv()) {
        load_flagged_lane<D / 32>(c.p.qkv_words + size_t(l) * C::kQkvRowFloats + at + lane, c.epoch(), v);
      } else {
#pragma unroll
        for (int e = 0; e < D / 32; ++e) v[e] = __ldcg(qkv + at + lane + 32 * e);
      }
    };
    if (warp < G) {
      float v[D / 32];
      load_row((g * G + warp) * D, v);
      qk_norm_rope_warp<D, C::R>(v, w.q_norm, c.p.inv_freq, c.pos, c.p.eps, sm_q + warp * D);
#pragma unroll
      for (int e = 0; e < D / 32; ++e) sm_q[warp * D + lane + 32 * e] = v[e] * c.p.attn_scale_log2;
    } else if (warp == G && range.appends(n)) {
      float v[D / 32], vv[D / 32];
      load_row(k0 + g * D, v);
      qk_norm_rope_warp<D, C::R>(v, w.k_norm, c.p.inv_freq, c.pos, c.p.eps, sm_q + G * D);
      load_row(k0 + C::KV + g * D, vv);  // after the rotation: not live through its sincosf
      const size_t at = (size_t(c.pos) * C::KV_HEADS + g) * D;
      bf16* kw = reinterpret_cast<bf16*>(w.k_cache) + at;
      bf16* vw = reinterpret_cast<bf16*>(w.v_cache) + at;
#pragma unroll
      for (int e = 0; e < D / 32; ++e) {
        kw[lane + 32 * e] = __float2bfloat16_rn(v[e]);
        vw[lane + 32 * e] = __float2bfloat16_rn(vv[e]);
      }
      // The __syncthreads below makes the rows visible to the CTA's own readers; other CTAs read them
      // in later tokens, ordered by the Step chain.
      if (c.p.ablate & kAblateFences) __threadfence();
    }
    __syncthreads();

    float qr[G][P], m[G], lsum[G], o[G][P];
#pragma unroll
    for (int h = 0; h < G; ++h) {
#pragma unroll
      for (int j = 0; j < P; ++j) {
        qr[h][j] = sm_q[h * D + sub * P + j];
        o[h][j] = 0.0f;
      }
      m[h] = -INFINITY;
      lsum[h] = 0.0f;
    }
    // RPW * kWarps streams (128-dim heads: 32 half-warps); stream RPW * warp + grp takes positions
    // begin + stream, + kStreams, ..., two per step.
    constexpr int kStreams = RPW * kWarps;
    for (int base = begin + RPW * warp; base < end; base += 2 * kStreams) {
      int pp[2] = {base + grp, base + kStreams + grp};
      uint4 kr[2], vr[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        if (pp[u] < end) {
          const size_t at = (size_t(pp[u]) * C::KV_HEADS + g) * D + sub * P;
          kr[u] = __ldcg(reinterpret_cast<const uint4*>(kc + at));
          vr[u] = __ldcg(reinterpret_cast<const uint4*>(vc + at));
        } else {
          kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const bool valid = pp[u] < end;
        float kf[P], vf[P];
        unpack_bf16x8(kr[u], kf);
        unpack_bf16x8(vr[u], vf);
#pragma unroll
        for (int h = 0; h < G; ++h) {
          float s = 0.0f;
#pragma unroll
          for (int j = 0; j < P; ++j) s = fmaf(qr[h][j], kf[j], s);
#pragma unroll
          for (int off = LR / 2; off > 0; off >>= 1) s += __shfl_xor_sync(kFullMask, s, off);
          if (valid) {
            const float mn = fmaxf(m[h], s);
            const float corr = exp2f(m[h] - mn);
            const float e = exp2f(s - mn);
            lsum[h] = lsum[h] * corr + e;
#pragma unroll
            for (int j = 0; j < P; ++j) o[h][j] = fmaf(e, vf[j], o[h][j] * corr);
            m[h] = mn;
          }
        }
      }
    }
    // Merge the warp's row streams (lanes sub, sub + LR, ... hold the same dims), pairwise by shuffle.
#pragma unroll
    for (int h = 0; h < G; ++h) {
#pragma unroll
      for (int off = 16; off >= LR; off >>= 1) {
        const float mo = __shfl_xor_sync(kFullMask, m[h], off), lo = __shfl_xor_sync(kFullMask, lsum[h], off);
        const float M = fmaxf(m[h], mo);
        const float wa = M == -INFINITY ? 0.0f : exp2f(m[h] - M), wb = M == -INFINITY ? 0.0f : exp2f(mo - M);
#pragma unroll
        for (int j = 0; j < P; ++j) {
          const float oo = __shfl_xor_sync(kFullMask, o[h][j], off);
          o[h][j] = o[h][j] * wa + oo * wb;
        }
        lsum[h] = lsum[h] * wa + lo * wb;
        m[h] = M;
      }
      if (grp == 0) {
#pragma unroll
        for (int j = 0; j < P; ++j) sm_o[(warp * G + h) * D + sub * P + j] = o[h][j];
        if (sub == 0) {
          sm_m[warp * G + h] = m[h];
          sm_l[warp * G + h] = lsum[h];
        }
      }
    }
    __syncthreads();
    // Merge the warps: one (m, l, o) per (head, split).
    for (int idx = threadIdx.x; idx < G * D; idx += kThreads) {
      const int h = idx / D, d = idx % D;
      float M = -INFINITY;
      for (int s = 0; s < kWarps; ++s) M = fmaxf(M, sm_m[s * G + h]);
      float L = 0.0f, O = 0.0f;
      if (M != -INFINITY) {
        for (int s = 0; s < kWarps; ++s) {
          const float wt = exp2f(sm_m[s * G + h] - M);
          L = fmaf(sm_l[s * G + h], wt, L);
          O = fmaf(sm_o[(s * G + h) * D + d], wt, O);
        }
      }
      const size_t slot = (size_t(l) * C::HEADS + g * G + h) * kMaxSplits + split;
      if (c.flagged_qkv() && c.o_proj_merges()) {  // else the ticket orders the floats for the merger
        store_flagged(c.p.partial_o_words + slot * D + d, O, c.epoch());
        if (d == 0) {
          store_flagged(c.p.partial_ml_words + 2 * slot, M, c.epoch());
          store_flagged(c.p.partial_ml_words + 2 * slot + 1, L, c.epoch());
        }
      } else {
        __stcg(c.p.partial_o + slot * D + d, O);
        if (d == 0) {
          __stcg(c.p.partial_ml + 2 * slot, M);
          __stcg(c.p.partial_ml + 2 * slot + 1, L);
        }
      }
    }
  }

  if (c.o_proj_merges()) {  // stage C reads the partials: no ticket to wait for
    if (c.flagged_qkv()) {  // the partials carry their epoch: AttnTicket only keeps counting the splits
      __syncthreads();       // stage C overwrites the scratch read above
      if (threadIdx.x == 0) red_relaxed_add(c.counter(Counter::AttnTicket, l, g), 1u);
      return;
    }
    signal_add(c.counter(Counter::AttnReady, l), 1u, c.p.ablate);
    if (threadIdx.x == 0) release_add(c.counter(Counter::AttnTicket, l, g), 1u, c.p.ablate);
    return;
  }
  // Ticket: the last split of (l, g) to arrive merges all non-empty splits into attn[l].
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t ticket = take_ticket(c.counter(Counter::AttnTicket, l, g), c.p.ablate);
    c.flags[0] = ticket == uint32_t(c.t + 1) * uint32_t(c.p.splits) - 1u;
  }
  __syncthreads();
  if (!c.flags[0]) return;
  const int used = attention_used_splits(n, c.p.splits);  // non-empty splits
  const uint32_t epoch = c.flagged_qkv() ? c.epoch() : 0u;
  for (int idx = 4 * int(threadIdx.x); idx < G * D; idx += 4 * kThreads) {
    const int head = g * G + idx / D, at = head * D + idx % D;
    const float4 o = merge_splits4<C>(c.p, l, head, idx % D, used);  // floats: after the ticket
    if (epoch) {
      uint64_t* out = c.p.attn_words + size_t(l) * C::kAttnRowFloats + at;
      store_flagged(out, o.x, epoch);
      store_flagged(out + 1, o.y, epoch);
      store_flagged(out + 2, o.z, epoch);
      store_flagged(out + 3, o.w, epoch);
    } else {
      __stcg(reinterpret_cast<float4*>(c.p.attn + size_t(l) * C::kAttnRowFloats + at), o);
    }
  }
  if (epoch) __syncthreads();  // stage C reads attn's words; only the barrier the signal would bring
  else signal_add(c.counter(Counter::AttnReady, l), uint32_t(c.p.splits), c.p.ablate);
}

template <class C>
__device__ void stage_attention(Ctx<C>& c, int l) {
  StageTimer timer(c.p.timing, c.cta, Stage::Attention, &c.stream.weight_wait_ns);
  const int items = C::KV_HEADS * c.p.splits;
  for (int item = c.cta; item < items; item += c.ctas) attention_item(c, l, item / c.p.splits, item % c.p.splits);
}

}  // namespace megaqwen::cuda::mk

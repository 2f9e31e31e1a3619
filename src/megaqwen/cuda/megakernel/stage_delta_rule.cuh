// Stage B' (Qwen3.5 DeltaNet layers): one token's gated delta rule, split over (value head, block of
// DELTA_COLS value columns). Given the token's q, k, beta and decay, column j of a head's state
// S [DK, DV] evolves on its own (kernels/gated_delta_net.cuh): S_:j *= alpha; m_j = k . S_:j;
// S_:j += k beta (v_j - m_j); o_j = q . S_:j. So items share nothing but their inputs.
//   work:    item = (value head hv, column block cb), DELTA_ITEMS = NV * DV / DELTA_COLS over the CTAs
//            (item i on CTA i mod ctas: the same CTA every token, so a state column is only ever read
//            and written by one CTA in a launch); thread (row group rg, column j) holds rows rg,
//            rg + RG, ... of column j in registers (RG = kThreads / DELTA_COLS)
//   in:      qkv[l]: q_hk, k_hk (hk = hv / VPK, after conv), v columns of hv, b[hv], a[hv]; A_log,
//            dt_bias; the state columns
//   out:     attn[l][hv * DV + col] = o (before the gated norm, which stage C' applies); state columns
//   bytes:   state 2 * DK * DV * 4 per value head per token (Qwen3.5-0.8B: 1 MB per layer, 64 KB per
//            item pair of passes); qkv 4 * (2 DK + DELTA_COLS) per item
//   waits:   QkvReady[l][hk] >= (t + 1) * delta_group_count
//   signals: AttnReady[l] += 1 per item (stage C' waits for all DELTA_ITEMS)
// q and k are l2-normalized by warps 0 and 1 (q also scaled by 1/sqrt(DK)); the column sums m_j and
// o_j add the row groups' partial sums in a fixed order (bit-reproducible).
#pragma once

#include "megaqwen/cuda/megakernel/context.cuh"

namespace megaqwen::cuda::mk {

__device__ __forceinline__ float softplus_torch(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

template <class C>
__device__ void delta_rule_item(Ctx<C>& c, int l, int hv, int cb) {
  constexpr int DK = C::DK, DV = C::DV, CB = C::DELTA_COLS, RG = kThreads / CB, ROWS = (DK + RG - 1) / RG;
  const int hk = hv / C::VPK, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const LayerWeights& w = c.p.layers[l];
  const float* in = c.p.qkv + size_t(l) * C::kQkvRowFloats;
  float* sq = c.vec;          // [DK] normalized q / sqrt(DK)
  float* sk = sq + DK;        // [DK] normalized k
  float* part = sk + DK;      // [kThreads] partial column sums
  float* sm = part + kThreads;  // [CB] m of the columns

  c.wait_input(c.counter(Counter::QkvReady, l, hk), uint32_t(c.t + 1) * uint32_t(delta_group_count<C>()));
  if (warp < 2) {
    const float* src = in + (warp == 0 ? 0 : C::NK * DK) + hk * DK;
    float* dst = warp == 0 ? sq : sk;
    float ss = 0.0f;
    for (int i = lane; i < DK; i += 32) {
      const float v = __ldcg(src + i);
      dst[i] = v;
      ss += v * v;
    }
    const float r = 1.0f / sqrtf(warp_sum(ss) + c.p.l2_eps);
    const float scale = warp == 0 ? 1.0f / sqrtf(float(DK)) : 1.0f;
    __syncwarp();
    for (int i = lane; i < DK; i += 32) dst[i] = warp == 0 ? (dst[i] * r) * scale : dst[i] * r;
  }
  __syncthreads();
  const float beta = 1.0f / (1.0f + expf(-__ldcg(in + C::CD + C::VD + hv)));
  const float alpha = expf(-expf(__ldg(w.A_log + hv)) * softplus_torch(__ldcg(in + C::CD + C::VD + C::NV + hv) + __ldg(w.dt_bias + hv)));

  const int j = threadIdx.x % CB, rg = threadIdx.x / CB, col = cb * CB + j;
  float* S = w.state + size_t(hv) * DK * DV + col;  // S[i][col] at S + i * DV
  float s[ROWS];
  float pm = 0.0f;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = rg + RG * r;
    s[r] = 0.0f;
    if (i < DK) {
      s[r] = __ldcg(S + size_t(i) * DV) * alpha;
      pm = fmaf(sk[i], s[r], pm);
    }
  }
  part[threadIdx.x] = pm;
  __syncthreads();
  if (threadIdx.x < CB) {
    float m = 0.0f;
    for (int q = 0; q < RG; ++q) m += part[q * CB + threadIdx.x];
    sm[threadIdx.x] = m;
  }
  __syncthreads();
  const float d = beta * (__ldcg(in + 2 * C::NK * DK + hv * DV + col) - sm[j]);
  float po = 0.0f;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = rg + RG * r;
    if (i < DK) {
      s[r] = fmaf(sk[i], d, s[r]);
      po = fmaf(sq[i], s[r], po);
      __stcg(S + size_t(i) * DV, s[r]);
    }
  }
  part[threadIdx.x] = po;  // every read of the m sums finished before the barrier above
  __syncthreads();
  if (threadIdx.x < CB) {
    float o = 0.0f;
    for (int q = 0; q < RG; ++q) o += part[q * CB + threadIdx.x];
    __stcg(c.p.attn + size_t(l) * C::kAttnRowFloats + hv * DV + col, o);
  }
  signal_add(c.counter(Counter::AttnReady, l), 1u, c.p.ablate);  // its barrier also frees the scratch
}

template <class C>
__device__ void stage_delta_rule(Ctx<C>& c, int l) {
  StageTimer timer(c.p.timing, c.cta, Stage::Attention, &c.stream.weight_wait_ns);
  constexpr int blocks = C::DV / C::DELTA_COLS;
  for (int item = c.cta; item < C::DELTA_ITEMS; item += c.ctas) delta_rule_item(c, l, item / blocks, item % blocks);
}

}  // namespace megaqwen::cuda::mk

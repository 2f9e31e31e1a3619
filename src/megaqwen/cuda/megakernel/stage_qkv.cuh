// Stage A: RMSNorm(x) redundantly, then this CTA's rows of the stacked q | k | v projection (a Qwen3.5
// gated-attention layer: q | gate | k | v, and its groups count (2G + 2) * D rows).
//   in:      x[l] (the embedding row for l = 0), input_norm[l]; weights qkv[l] rows [row0, row0 + rows)
//   out:     qkv[l][row] fp32 for the CTA's rows (raw projections; QK-norm and RoPE run in stage B)
//   bytes:   weights (Q + 2KV) * H * 2 per token over all CTAs (0.6B: 8.4 MB; ~64 KB per CTA);
//            reads x (4H bytes) per CTA from L2, writes 4 * rows
//   waits:   DownDone[l - 1] >= ctas * (t + 1) (layer 0: the Step wait at the token start)
//   signals: QkvReady[l][g] += rows of kv group g among its rows (q heads gG..gG+G-1, k_g, v_g), so
//            group g's attention starts once its (G + 2) * D rows are written, not the whole stage
#pragma once

#include "megaqwen/cuda/megakernel/context.cuh"

namespace megaqwen::cuda::mk {

template <class C>
__device__ void stage_qkv(Ctx<C>& c, int l) {
  StageTimer timer(c.p.timing, c.cta, Stage::Qkv);
  const Part& pt = c.part(Mat::Qkv);
  if (pt.rows == 0) return;  // no rows: nothing to signal (QkvReady counts rows)
  if (l > 0) wait_at_least(c.counter(Counter::DownDone, l - 1), c.all_ctas(), c.p.ablate);
  timer.waited();
  const LayerWeights& w = c.p.layers[l];
  rms_norm_to_smem<C::H>([&](int i) { return c.residual(l, i); }, w.input_norm, c.p.eps, c.vec, c.red);
  float* out = c.p.qkv + size_t(l) * C::kQkvRowFloats;
  stream_rows<C::H>(c, Mat::Qkv, c.vec, [&](int row, float a0, float a1, bool has1) {
    __stcg(out + row, a0);
    if (has1) __stcg(out + row + 1, a1);
  });
  // Rows of each kv group among [row0, row0 + rows): q rows of group g are [gGD, (g+1)GD), its k rows
  // [Q + gD, Q + (g+1)D), its v rows [Q + KV + gD, ...).
  __syncthreads();
  if (threadIdx.x < C::KV_HEADS) {
    const int g = threadIdx.x;
    const int n = qkv_group_rows<C>(pt.row0, pt.rows, g);
    if (n > 0) release_add(c.counter(Counter::QkvReady, l, g), uint32_t(n), c.p.ablate);
  }
  c.stream.flush();
}

}  // namespace megaqwen::cuda::mk

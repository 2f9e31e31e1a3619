// Stage A: RMSNorm(x) redundantly, then this CTA's rows of the stacked q | k | v projection (a Qwen3.5
// gated-attention layer: q | gate | k | v, and its groups count (2G + 2) * D rows).
//   in:      x[l] (the embedding row for l = 0), input_norm[l]; weights qkv[l] rows [row0, row0 + rows)
//   out:     qkv[l][row] fp32 for the CTA's rows (raw projections; QK-norm and RoPE run in stage B)
//   bytes:   weights (Q + 2KV) * H * 2 per token over all CTAs (0.6B: 8.4 MB; ~64 KB per CTA);
//            reads x (4H bytes) per CTA from L2, writes 4 * rows
//   waits:   DownDone[l - 1] >= ctas * (t + 1) (layer 0: the Step wait at the token start); flagged
//            vectors: polls x[l]'s words for the token's epoch instead (with the one-stage MLP, whose
//            sums carry no epoch, DownDone all the same)
//   signals: QkvReady[l][g] += rows of kv group g among its rows (q heads gG..gG+G-1, k_g, v_g), so
//            group g's attention starts once its (G + 2) * D rows are written, not the whole stage;
//            Qwen3 with flagged vectors: nothing (qkv's words carry the epoch, stage B polls them)
#pragma once

#include "megaqwen/cuda/megakernel/context.cuh"

namespace megaqwen::cuda::mk {

// Stages A and A' (stage_delta_in.cuh): the layer's input RMSNorm'd by every CTA itself, this CTA's
// rows of the mixer's input projection m (K = H) into qkv[l], each row's result passed through
// value(row, a) first; then each of the `groups` groups' rows among them (group_rows(row0, rows, g))
// added to QkvReady[l][g], so a group's consumer starts once its rows are written, not the whole stage.
template <class C, class Value, class GroupRows>
__device__ __forceinline__ void mixer_input(Ctx<C>& c, int l, Mat m, int groups, Value&& value,
                                            GroupRows&& group_rows) {
  StageTimer timer(c.p.timing, c.cta, Stage::Qkv, &c.stream.weight_wait_ns);
  const Part& pt = c.part(m);
  if (pt.rows == 0) return;  // no rows: nothing to signal (QkvReady counts rows)
  const float* norm_w = c.p.layers[l].input_norm;
  if (l > 0 && c.x_flagged()) {
    load_flagged_vec<C::H>(c.p.x_words + size_t(l) * C::H, c.epoch(), c.vec);  // polling it is the wait
    timer.waited();
    rms_norm_to_smem<C::H>([&](int i) { return c.vec[i]; }, norm_w, c.p.eps, c.vec, c.red);
  } else {
    if (l > 0) c.wait_input(c.counter(Counter::DownDone, l - 1), c.all_ctas());
    timer.waited();
    rms_norm_to_smem<C::H>([&](int i) { return c.residual(l, i); }, norm_w, c.p.eps, c.vec, c.red);
  }
  stream_rows<C::H>(c, m, c.vec, [&](int row, float a0, float a1, bool has1) {
    c.store_qkv(l, row, value(row, a0));
    if (has1) c.store_qkv(l, row + 1, value(row + 1, a1));
  });
  __syncthreads();  // also: stage B overwrites the shared memory read above
  if (!c.flagged_qkv() && int(threadIdx.x) < groups) {
    const int g = int(threadIdx.x);
    const int n = group_rows(pt.row0, pt.rows, g);
    if (n > 0) release_add(c.counter(Counter::QkvReady, l, g), uint32_t(n), c.p.ablate);
  }
  c.stream.flush();
}

template <class C>
__device__ void stage_qkv(Ctx<C>& c, int l) {
  mixer_input(c, l, Mat::Qkv, C::KV_HEADS, [](int, float a) { return a; },
              [](int row0, int rows, int g) { return qkv_group_rows<C>(row0, rows, g); });
}

}  // namespace megaqwen::cuda::mk

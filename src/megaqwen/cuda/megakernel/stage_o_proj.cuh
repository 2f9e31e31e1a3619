// Stage C: the attention output projection and the residual add.
//   in:      attn[l] (Q floats, merged by stage B), x[l] (embedding row for l = 0) at its rows;
//            weights o[l] rows [row0, row0 + rows), K = Q
//   out:     xmid[l][row] = x[l][row] + (o[l] attn)[row]
//   bytes:   weights H * Q * 2 per token over all CTAs (0.6B: 4.2 MB; 32 KB per CTA); attn 4Q per CTA
//            from L2
//   waits:   AttnReady[l] >= (t + 1) * kv_heads (every kv head merged); CTAs without rows skip it
//   signals: ODone[l] += 1 (every CTA, rows or not)
#pragma once

#include "megaqwen/cuda/megakernel/context.cuh"

namespace megaqwen::cuda::mk {

template <class C>
__device__ void stage_o_proj(Ctx<C>& c, int l) {
  StageTimer timer(c.p.timing, c.cta, Stage::OProj, &c.stream.weight_wait_ns);
  if (c.part(Mat::O).rows > 0) {
    wait_at_least(c.counter(Counter::AttnReady, l), uint32_t(c.t + 1) * uint32_t(C::KV_HEADS), c.p.ablate);
    timer.waited();
    load_vec(c.p.attn + size_t(l) * C::kAttnRowFloats, C::Q, c.vec);
    float* out = c.p.xmid + size_t(l) * C::H;
    stream_rows<C::Q>(c, Mat::O, c.vec, [&](int row, float a0, float a1, bool has1) {
      __stcg(out + row, c.residual(l, row) + a0);
      if (has1) __stcg(out + row + 1, c.residual(l, row + 1) + a1);
    });
  }
  signal_add(c.counter(Counter::ODone, l), 1u, c.p.ablate);
  c.stream.flush();
}

}  // namespace megaqwen::cuda::mk

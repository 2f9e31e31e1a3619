// Stage E: the MLP down projection and the residual add; its output is the next layer's input.
//   in:      act[l] (I floats), xmid[l] at its rows; weights down[l] rows [row0, row0 + rows), K = I
//   out:     x[l + 1][row] = xmid[l][row] + (down[l] act)[row]
//   bytes:   weights H * I * 2 per token over all CTAs (0.6B: 6.3 MB; 48 KB per CTA); act 4I per CTA
//            from L2
//   waits:   MlpDone[l] >= ctas * (t + 1)
//   signals: DownDone[l] += 1 (every CTA)
#pragma once

#include "megaqwen/cuda/megakernel/context.cuh"

namespace megaqwen::cuda::mk {

template <class C>
__device__ void stage_down(Ctx<C>& c, int l) {
  StageTimer timer(c.p.timing, c.cta, Stage::Down, &c.stream.weight_wait_ns);
  if (c.part(Mat::Down).rows > 0) {
    wait_at_least(c.counter(Counter::MlpDone, l), c.all_ctas(), c.p.ablate);
    timer.waited();
    load_vec(c.p.act + size_t(l) * C::I, C::I, c.vec);
    const float* xm = c.p.xmid + size_t(l) * C::H;
    float* out = c.p.x + size_t(l + 1) * C::H;
    stream_rows<C::I>(c, Mat::Down, c.vec, [&](int row, float a0, float a1, bool has1) {
      __stcg(out + row, __ldcg(xm + row) + a0);
      if (has1) __stcg(out + row + 1, __ldcg(xm + row + 1) + a1);
    });
  }
  signal_add(c.counter(Counter::DownDone, l), 1u, c.p.ablate);
  c.stream.flush();
}

}  // namespace megaqwen::cuda::mk

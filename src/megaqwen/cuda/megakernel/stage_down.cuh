// Stage E: the MLP down projection and the residual add; its output is the next layer's input.
//   in:      act[l] (I floats), xmid[l] at its rows; weights down[l] rows [row0, row0 + rows), K = I
//   out:     x[l + 1][row] = xmid[l][row] + (down[l] act)[row]
//   bytes:   weights H * I * 2 per token over all CTAs (0.6B: 6.3 MB; 48 KB per CTA); act 4I per CTA
//            from L2
//   waits:   MlpDone[l] >= ctas * (t + 1); flagged vectors: polls act[l]'s words for the token's epoch
//   signals: DownDone[l] += 1 (every CTA; not with flagged vectors)
#pragma once

#include "megaqwen/cuda/megakernel/context.cuh"

namespace megaqwen::cuda::mk {

template <class C>
__device__ void stage_down(Ctx<C>& c, int l) {
  StageTimer timer(c.p.timing, c.cta, Stage::Down, &c.stream.weight_wait_ns);
  if (c.part(Mat::Down).rows > 0) {
    if (c.flagged()) {
      load_flagged_vec<C::I>(c.p.act_words + size_t(l) * C::I, c.epoch(), c.vec);  // polling it is the wait
      timer.waited();
      __syncthreads();
    } else {
      c.wait_input(c.counter(Counter::MlpDone, l), c.all_ctas());
      timer.waited();
      load_vec(c.p.act + size_t(l) * C::I, C::I, c.vec);
    }
    stream_rows<C::I>(
        c, Mat::Down, c.vec,
        [&](int row, float x0, float x1, bool has1) {
          c.store_x(l + 1, row, x0);
          if (has1) c.store_x(l + 1, row + 1, x1);
        },
        [&](int row, bool has1) { return make_float2(c.xmid_at(l, row), has1 ? c.xmid_at(l, row + 1) : 0.0f); });
  }
  c.signal_all_ctas(Counter::DownDone, l);
  c.stream.flush();
}

}  // namespace megaqwen::cuda::mk

// Stage D: RMSNorm(xmid) redundantly, then this CTA's gate/up row pairs and SwiGLU.
//   in:      xmid[l] (H floats), post_norm[l]; weights gate_up[l] rows [row0, row0 + rows) (whole
//            pairs: gate row i at 2i, up row i at 2i + 1, so silu(gate) * up is local to a warp)
//   out:     act[l][i] = silu(gate_i . h) * (up_i . h) for its pairs
//   bytes:   weights 2 * I * H * 2 per token over all CTAs (0.6B: 12.6 MB; 96 KB per CTA, 2 chunks);
//            xmid 4H per CTA from L2
//   waits:   ODone[l] >= ctas * (t + 1) (the whole residual is needed for the norm)
//   signals: MlpDone[l] += 1 (every CTA)
#pragma once

#include "megaqwen/cuda/megakernel/context.cuh"

namespace megaqwen::cuda::mk {

template <class C>
__device__ void stage_mlp(Ctx<C>& c, int l) {
  StageTimer timer(c.p.timing, c.cta, Stage::Mlp, &c.stream.weight_wait_ns);
  if (c.part(Mat::GateUp).rows > 0) {
    wait_at_least(c.counter(Counter::ODone, l), c.all_ctas(), c.p.ablate);
    timer.waited();
    const float* xm = c.p.xmid + size_t(l) * C::H;
    rms_norm_to_smem<C::H>([&](int i) { return __ldcg(xm + i); }, c.p.layers[l].post_norm, c.p.eps, c.vec, c.red);
    float* out = c.p.act + size_t(l) * C::I;
    stream_rows<C::H>(c, Mat::GateUp, c.vec, [&](int row, float gate, float up, bool) {
      __stcg(out + row / 2, gate / (1.0f + expf(-gate)) * up);  // rows come in aligned pairs
    });
  }
  signal_add(c.counter(Counter::MlpDone, l), 1u, c.p.ablate);
  c.stream.flush();
}

}  // namespace megaqwen::cuda::mk

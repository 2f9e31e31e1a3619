// Stage D: RMSNorm(xmid) redundantly, then this CTA's gate/up row pairs and SwiGLU.
//   in:      xmid[l] (H floats), post_norm[l]; weights gate_up[l] rows [row0, row0 + rows) (whole
//            pairs: gate row i at 2i, up row i at 2i + 1, so silu(gate) * up is local to a warp)
//   out:     act[l][i] = silu(gate_i . h) * (up_i . h) for its pairs
//   bytes:   weights 2 * I * H * 2 per token over all CTAs (0.6B: 12.6 MB; 96 KB per CTA, 2 chunks);
//            xmid 4H per CTA from L2
//   waits:   ODone[l] >= ctas * (t + 1) (the whole residual is needed for the norm); flagged vectors:
//            polls xmid[l]'s words for the token's epoch instead
//   signals: MlpDone[l] += 1 (every CTA; not with flagged vectors)
#pragma once

#include "megaqwen/cuda/megakernel/context.cuh"

namespace megaqwen::cuda::mk {

// Stage D's work up to its outputs, shared with the one-stage MLP (stage_mlp_one_stage.cuh): the
// wait for xmid[l] (ODone, or its flagged words), its RMSNorm, then the CTA's gate/up row pairs;
// store(unit, act) runs on lane 0 of a warp for each of its units. The CTA must own gate/up rows.
template <class C, class Store>
__device__ __forceinline__ void gate_up_swiglu(Ctx<C>& c, int l, StageTimer& timer, Store&& store) {
  const float* norm_w = c.p.layers[l].post_norm;
  if (c.flagged()) {
    load_flagged_vec<C::H>(c.p.xmid_words + size_t(l) * C::H, c.epoch(), c.vec);  // polling it is the wait
    timer.waited();
    rms_norm_to_smem<C::H>([&](int i) { return c.vec[i]; }, norm_w, c.p.eps, c.vec, c.red);
  } else {
    c.wait_input(c.counter(Counter::ODone, l), c.all_ctas());
    timer.waited();
    const float* xm = c.p.xmid + size_t(l) * C::H;
    rms_norm_to_smem<C::H>([&](int i) { return __ldcg(xm + i); }, norm_w, c.p.eps, c.vec, c.red);
  }
  stream_rows<C::H>(c, Mat::GateUp, c.vec, [&](int row, float gate, float up, bool) {
    store(row / 2, gate / (1.0f + expf(-gate)) * up);  // rows come in aligned pairs
  });
}

template <class C>
__device__ void stage_mlp(Ctx<C>& c, int l) {
  StageTimer timer(c.p.timing, c.cta, Stage::Mlp, &c.stream.weight_wait_ns);
  if (c.part(Mat::GateUp).rows > 0) gate_up_swiglu(c, l, timer, [&](int unit, float a) { c.store_act(l, unit, a); });
  c.signal_all_ctas(Counter::MlpDone, l);
  c.stream.flush();
}

}  // namespace megaqwen::cuda::mk

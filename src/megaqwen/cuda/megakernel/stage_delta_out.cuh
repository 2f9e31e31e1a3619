// Stage C' (Qwen3.5 DeltaNet layers): the gated RMSNorm of every value head, computed redundantly by
// each CTA with rows (NV x DV floats), then this CTA's rows of out_proj and the residual add.
//   in:      attn[l] (o of every value head, VD floats, from stage B'), qkv[l]'s z rows, gated_norm[l];
//            x[l] (the embedding row for l = 0) at its rows; weights out[l] rows [row0, row0 + rows), K = VD
//   out:     xmid[l][row] = x[l][row] + (out . gated_norm(o, z))[row]
//   bytes:   weights H * VD * 2 per token over all CTAs (Qwen3.5-0.8B: 4.2 MB; 32 KB per CTA);
//            o and z 8 * VD per CTA from L2
//   waits:   AttnReady[l] >= (t + 1) * DELTA_ITEMS (every item written); CTAs without rows skip it
//   signals: ODone[l] += 1 (every CTA, rows or not; not with flagged vectors: xmid carries its epoch)
// The norm: o * rsqrt(mean(o^2) + eps) * w * silu(z) per head, as kernels/gated_delta_net.cuh's
// gated_rms_norm_kernel (one warp per head here; its sum of squares adds in another order).
#pragma once

#include "megaqwen/cuda/megakernel/context.cuh"

namespace megaqwen::cuda::mk {

template <class C>
__device__ void stage_delta_out(Ctx<C>& c, int l) {
  StageTimer timer(c.p.timing, c.cta, Stage::OProj, &c.stream.weight_wait_ns);
  if (c.part(Mat::Out).rows > 0) {
    c.wait_input(c.counter(Counter::AttnReady, l), uint32_t(c.t + 1) * uint32_t(C::DELTA_ITEMS));
    timer.waited();
    load_vec(c.p.attn + size_t(l) * C::kAttnRowFloats, C::VD, c.vec);
    const float* z = c.p.qkv + size_t(l) * C::kQkvRowFloats + C::CD;
    const float* gw = c.p.layers[l].gated_norm;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int h = warp; h < C::NV; h += kWarps) {
      float* o = c.vec + h * C::DV;
      float ss = 0.0f;
      for (int i = lane; i < C::DV; i += 32) ss += o[i] * o[i];
      const float scale = 1.0f / sqrtf(warp_sum(ss) / float(C::DV) + c.p.eps);
      for (int i = lane; i < C::DV; i += 32) {
        const float g = __ldcg(z + h * C::DV + i);
        o[i] = __ldg(gw + i) * (o[i] * scale) * (g / (1.0f + expf(-g)));
      }
    }
    __syncthreads();
    project_into_xmid<C::VD>(c, Mat::Out, l, c.vec);
  }
  c.signal_all_ctas(Counter::ODone, l);
  c.stream.flush();
}

}  // namespace megaqwen::cuda::mk

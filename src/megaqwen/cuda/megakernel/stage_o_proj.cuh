// Stage C: the attention output projection and the residual add.
//   in:      the attention output: with few non-empty splits (Ctx::o_proj_merges) their partials,
//            merged here by every CTA (merge_splits4), else attn[l] (Q floats, merged by stage B);
//            x[l] (embedding row for l = 0) at its rows; weights o[l] rows [row0, row0 + rows), K = Q
//   out:     xmid[l][row] = x[l][row] + (o[l] attn)[row]
//   bytes:   weights H * Q * 2 per token over all CTAs (0.6B: 4.2 MB; 32 KB per CTA); per CTA from
//            L2 4Q (attn) or (4Q + 8 heads) per non-empty split (partials, at most merge_splits)
//   waits:   AttnReady[l] >= (t + 1) * kv_heads * splits (every split written, or every kv head
//            merged); CTAs without rows skip it. Qwen3 with flagged vectors: polls the partials' or
//            attn's words instead (with the one-stage MLP, a CTA without stage-A rows first acquires
//            DownDone[l - 1], l > 0: below)
//   signals: ODone[l] += 1 (every CTA, rows or not; not with flagged vectors: xmid carries its epoch)
#pragma once

#include "megaqwen/cuda/megakernel/stage_attention.cuh"  // merge_splits4

namespace megaqwen::cuda::mk {

template <class C>
__device__ void stage_o_proj(Ctx<C>& c, int l) {
  StageTimer timer(c.p.timing, c.cta, Stage::OProj, &c.stream.weight_wait_ns);
  if (c.part(Mat::O).rows > 0) {
    const bool flagged = c.flagged_qkv();  // polling the partials or attn's words is the wait
    // The residual below reads the one-stage MLP's sum for layer l - 1, which only DownDone orders
    // after every add. Through counters the chain DownDone -> A -> QkvReady -> B -> AttnReady carries
    // that order here; polled flagged words carry none. A CTA with rows in stage A acquired DownDone
    // there, earlier in its own program; one without (possible only where a shape gives the CTAs
    // fewer qkv rows than o_proj rows) acquires it now, long reached by then: one L2 round trip.
    if (flagged && c.one_stage_mlp() && l > 0 && c.part(Mat::Qkv).rows == 0)
      c.wait_input(c.counter(Counter::DownDone, l - 1), c.all_ctas());
    if (!flagged) {
      c.wait_input(c.counter(Counter::AttnReady, l), uint32_t(c.t + 1) * uint32_t(C::KV_HEADS * c.p.splits));
      timer.waited();
    }
    if (c.o_proj_merges()) {
      const int used = attention_used_splits(c.pos + 1, c.p.splits);
      const uint32_t epoch = flagged ? c.epoch() : 0u;
      for (int i = 4 * int(threadIdx.x); i < C::Q; i += 4 * kThreads)
        *reinterpret_cast<float4*>(c.vec + i) = merge_splits4<C>(c.p, l, i / C::D, i % C::D, used, epoch);
      __syncthreads();
    } else if (flagged) {
      // Batches of 4 words: 8 (the 4B's 4,096 floats at once) made ptxas spill 6x more in that config.
      load_flagged_vec<C::Q, 4>(c.p.attn_words + size_t(l) * C::kAttnRowFloats, c.epoch(), c.vec);
      __syncthreads();
    } else {
      load_vec(c.p.attn + size_t(l) * C::kAttnRowFloats, C::Q, c.vec);
    }
    if (flagged) timer.waited();
    project_into_xmid<C::Q>(c, Mat::O, l, c.vec);
  }
  c.signal_all_ctas(Counter::ODone, l);
  c.stream.flush();
}

}  // namespace megaqwen::cuda::mk

// The megakernel: Qwen3 decode as one persistent kernel that draws many tokens per launch.
// One CTA per SM (all co-resident: the host checks occupancy before launching), kThreads threads.
// Per token, each CTA runs, in order:
//   for each layer l:  A stage_qkv  ->  B stage_attention  ->  C stage_o_proj  ->  D stage_mlp  ->  E stage_down
//   then               stage_lm_head (final norm, LM head slice, per-CTA best, token selection)
// A Qwen3.5 hybrid's DeltaNet layers run A' stage_delta_in -> B' stage_delta_rule -> C' stage_delta_out
// in place of A -> B -> C (its attention layers run A, B, C with the gated-attention variants).
// The one-stage MLP (Params::x_fixed, stage_mlp_one_stage.cuh) runs D and E as one stage; its sums'
// other parity half is zeroed at each token's start (Ctx::clear_next_mlp_sums).
// The token loop continues with the drawn token's embedding row, at position + 1, until the
// selecting CTA sets Done (eos id, budget, host stop request). No grid-wide barrier: each stage waits
// only for the counter(s) its input needs (layout.h), and the weight stream (stream.cuh) runs ahead of
// those waits across stage, layer and token boundaries.
// Shared memory (configs.cuh): [kStages weight buffers][vector / attention scratch][small: mbarriers,
// reduction scratch, flags, the schedule].
// This file is the kernel's body; the __global__ kernels and their launchers are in megakernel.cu.
#pragma once

#include "megaqwen/cuda/megakernel/stage_attention.cuh"
#include "megaqwen/cuda/megakernel/stage_delta_in.cuh"
#include "megaqwen/cuda/megakernel/stage_delta_out.cuh"
#include "megaqwen/cuda/megakernel/stage_delta_rule.cuh"
#include "megaqwen/cuda/megakernel/stage_down.cuh"
#include "megaqwen/cuda/megakernel/stage_lm_head.cuh"
#include "megaqwen/cuda/megakernel/stage_mlp.cuh"
#include "megaqwen/cuda/megakernel/stage_mlp_one_stage.cuh"
#include "megaqwen/cuda/megakernel/stage_o_proj.cuh"
#include "megaqwen/cuda/megakernel/stage_qkv.cuh"

namespace megaqwen::cuda::mk {

// Offsets inside the small region.
constexpr int kSmallBars = 0;      // kStages mbarriers (8 bytes each)
constexpr int kSmallRed = 64;      // 64 floats
constexpr int kSmallFlags = 320;   // 16 ints
constexpr int kSmallSched = 384;   // Schedule<C>

// One CTA's whole launch. `smem`: C::kSmemBytes of dynamic shared memory, 128-byte aligned. The
// __global__ wrapper (megakernel.cu) passes its `extern __shared__` array; the host SIMT emulator
// (tests/simt, built with MEGAQWEN_SIMT) calls this directly for every CTA of a co-resident grid.
template <class C>
__device__ __forceinline__ void megakernel_body(const Params& p, uint8_t* smem) {
  static_assert(C::kStages * 8 <= kSmallRed, "mbarriers overflow their slot");
  static_assert(kSmallSched + sizeof(Schedule<C>) <= C::kSmallBytes, "the schedule does not fit the small region");
  static_assert(sizeof(SelectShared) <= size_t(C::kScratchFloats) * 4, "the selection scratch does not fit the vector region");
  uint8_t* small = smem + C::kStages * C::kBufBytes + size_t(C::kScratchFloats) * 4;
  Ctx<C> c(p);
  c.vec = reinterpret_cast<float*>(smem + C::kStages * C::kBufBytes);
  c.red = reinterpret_cast<float*>(small + kSmallRed);
  c.flags = reinterpret_cast<int*>(small + kSmallFlags);
  c.sched = reinterpret_cast<Schedule<C>*>(small + kSmallSched);
  if (threadIdx.x == 0) {
    c.sched->init(c.cta, c.ctas, p.vocab, p.delta_layers, p.x_fixed != nullptr);
    c.flags[kFlagWaitForm] = int(p.ablate | ((p.probe & kProbeNoWaits) ? kSkipWait : 0u));
  }
  c.stream.init(smem, reinterpret_cast<uint64_t*>(small + kSmallBars), c.sched, &p);  // syncs
  c.stream.prime();  // the first weight chunks are in flight before anything else happens
  c.token = p.first_token;

  for (int t = 0; t < p.max_tokens; ++t) {
    c.t = t;
    c.pos = p.pos0 + t;
    if (t > 0) {
      // The previous token's selection: Step = t (release by the selecting CTA).
      {
        StageTimer timer(p.timing, c.cta, Stage::Select, &c.stream.weight_wait_ns);
        wait_at_least(c.counter(Counter::Step), uint32_t(t), c.p.ablate);
      }
      if (threadIdx.x == 0) {
        c.flags[1] = __ldcg(reinterpret_cast<const int*>(c.counter(Counter::Done)));
        c.flags[2] = __ldcg(p.tokens + t - 1);
      }
      __syncthreads();
      if (c.flags[1]) break;
      c.token = c.flags[2];
    }
    if (c.one_stage_mlp()) c.clear_next_mlp_sums();
    for (int l = 0; l < C::L; ++l) {
      bool delta = false;
      if constexpr (C::kHybrid) {
        delta = c.sched->is_delta(l);
        if (delta) {  // a Qwen3.5 Gated DeltaNet layer
          stage_delta_in(c, l);
          stage_delta_rule(c, l);
          stage_delta_out(c, l);
        }
      }
      if (!delta) {
        stage_qkv(c, l);
        stage_attention(c, l);
        stage_o_proj(c, l);
      }
      if (c.one_stage_mlp()) {
        stage_mlp_one_stage(c, l);
      } else {
        stage_mlp(c, l);
        stage_down(c, l);
      }
    }
    stage_lm_head(c);
    __syncthreads();  // flags[0] is reused at the next token
  }
  c.stream.drain();
}

}  // namespace megaqwen::cuda::mk

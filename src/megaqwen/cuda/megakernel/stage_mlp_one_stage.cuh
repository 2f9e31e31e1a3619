// Stages D and E in one (the one-stage MLP, MEGAQWEN_MK_MLP=one-stage; layout.h, Params::x_fixed).
// Each CTA owns a slice of the intermediate units: after its gate/up row pairs and SwiGLU it keeps
// its units' act in shared memory and multiplies them by the same units' rows of down^T (the
// transposed down, [I, H]), a partial of all H outputs; every CTA adds its partial into the sum for
// layer l + 1 (fixed_sum.cuh: integer red.add, exact in any order), which its readers add to
// xmid[l] (Ctx::residual). The sums come in two halves by token parity, each zeroed by the CTAs
// during the token before its use (Ctx::clear_next_mlp_sums), so nothing has to start them.
// What it saves: the D -> E edge (MlpDone: a release, a poll and the act vector through L2), one of
// five per layer, for H contended red.adds per CTA and a barrier's wait for them to drain before the
// release of DownDone. The two-stage form (stage_mlp.cuh, stage_down.cuh) stays the default until the
// H200 says which is faster.
//   in:      xmid[l] (H floats), post_norm[l]; weights gate_up[l] rows [2 u0, 2 (u0 + n)) and down_t[l]
//            rows [u0, u0 + n): the CTA's n units (0.6B on 132 CTAs: 24 units, 96 + 48 KB)
//   out:     mlp_sum(l + 1)[j] += sum over its units u of act_u * down_t[u][j], for every j < H
//   waits:   ODone[l] >= ctas * (t + 1) (the norm needs the whole xmid); flagged vectors: polls
//            xmid[l]'s words for the token's epoch instead
//   signals: DownDone[l] += 1 (every CTA, units or not; with flagged vectors too: the sum carries no
//            epoch); MlpDone stays 0
// Shared memory (the vector region): the normed xmid in [0, H) while gate/up runs, act at kActOffset,
// then the row sets' partials in [0, kPartialFloats).
#pragma once

#include "megaqwen/cuda/megakernel/stage_mlp.cuh"  // gate_up_swiglu

namespace megaqwen::cuda::mk {

template <class C>
__device__ void stage_mlp_one_stage(Ctx<C>& c, int l) {
  using M = OneStageMlp<C>;  // configs.cuh: the thread map and the shared-memory offsets
  float* act = c.vec + M::kActOffset;
  const Part& dt = c.part(Mat::DownT);  // the units of the CTA's gate/up pairs (schedule.cuh)
  {
    StageTimer timer(c.p.timing, c.cta, Stage::Mlp, &c.stream.weight_wait_ns);
    if (dt.rows > 0) {
      gate_up_swiglu(c, l, timer, [&](int unit, float a) { act[unit - dt.row0] = a; });
      c.stream.flush();  // no signal here: the last gate/up buffer's refill goes out at once
    }
  }
  StageTimer timer(c.p.timing, c.cta, Stage::Down, &c.stream.weight_wait_ns);
  if (dt.rows > 0) {
    const int r = int(threadIdx.x) / M::kGroups, g = int(threadIdx.x) % M::kGroups;
    const bool active = int(threadIdx.x) < M::kActive;
    float acc[8] = {};
    for (int j = 0; j < dt.chunks; ++j) {
      const int first = j * dt.chunk_rows, rows = min(dt.chunk_rows, dt.rows - first);
      const uint4* w = reinterpret_cast<const uint4*>(c.stream.wait());
      if (active) {
        for (int u = r; u < rows; u += M::kRowSets) {
          const float a = act[first + u];
          float f[8];
          unpack_bf16x8(w[size_t(u) * M::kGroups + size_t(g)], f);
#pragma unroll
          for (int k = 0; k < 8; ++k) acc[k] = fmaf(f[k], a, acc[k]);
        }
      }
      if (j == dt.chunks - 1 && !(c.p.ablate & kAblateDeferredRefill)) c.stream.release_deferred();
      else c.stream.release();  // its barrier: every thread is past its reads of act for this chunk
    }
    float* partial = c.vec;  // the normed xmid is no longer read (the releases' barriers)
    if (active) {
      float4* out = reinterpret_cast<float4*>(partial + r * C::H + g * 8);
      out[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      out[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    }
    __syncthreads();
    unsigned long long* sum = c.mlp_sum(l + 1);
    for (int i = int(threadIdx.x); i < C::H; i += kThreads) {
      float s = partial[i];
      for (int k = 1; k < M::kRowSets; ++k) s += partial[k * C::H + i];
      add_fixed(sum + i, to_fixed(s));
    }
  }
  signal_add(c.counter(Counter::DownDone, l), 1u, c.p.ablate);  // its barrier orders every thread's adds before the release
  c.stream.flush();
}

}  // namespace megaqwen::cuda::mk

// The edge probe: the megakernel's all-CTA dependency edge alone, so a benchmark can measure what one
// edge costs on a GPU without any weight traffic (bench/engine/bench_mk_edges.cpp; docs/MEGAKERNEL.md).
// Each of `edges` rounds does what a stage between two all-CTA counters does, minus the matrix work:
//   read the whole vector the previous round produced (n floats through L2, as a stage's RMSNorm
//   reads the residual), reduce it block-wide, write this CTA's slice of the next vector, then
//   signal_add the counter and wait_at_least for every CTA's signal of this round (sync.cuh).
// Vectors alternate between two buffers (round e reads buf[e & 1], writes buf[(e + 1) & 1]); the wait
// that ends round e - 1 orders every read of a buffer before its next write. Each element owner adds 1
// per round, so after E rounds every element of buf[E & 1] is E (what the test checks).
// The flagged form (EdgeProbeArgs::words) does the same with flagged words (sync.cuh) and no counter:
// round e polls buf[e & 1] until every word carries round e, writes its slice of buf[(e + 1) & 1] as
// (value, e + 1). A CTA can only overwrite buf[e & 1] (in round e + 1) once every CTA wrote round e's
// words, which each does after its last read of buf[e & 1] (the written values depend on those reads),
// so two buffers still suffice. After E rounds buf[E & 1] holds (E, E) everywhere.
#pragma once

#include "megaqwen/cuda/kernels/common.cuh"
#include "megaqwen/cuda/megakernel/megakernel.h"  // EdgeProbeArgs
#include "megaqwen/cuda/megakernel/sync.cuh"

namespace megaqwen::cuda::mk {

// Block-wide; every CTA of a co-resident grid runs it. red: 32 floats of shared memory.
__device__ __forceinline__ void edge_probe_body(const EdgeProbeArgs& a, float* red) {
  const int ctas = int(gridDim.x), cta = int(blockIdx.x);
  const int per = a.n > 0 ? (a.n + ctas - 1) / ctas : 0;
  const int begin = min(a.n, cta * per), end = min(a.n, begin + per);
  if (a.words) {
    constexpr int PER = kEdgeProbeMaxFlagged / kThreads;
    for (int e = 0; e < a.edges; ++e) {
      const uint64_t* in = a.words + size_t(e & 1) * size_t(a.n);
      uint64_t* out = a.words + size_t((e + 1) & 1) * size_t(a.n);
      uint64_t w[PER];
      load_flagged<PER>(in, a.n, uint32_t(e), w);
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < PER; ++j) s += value_of(w[j]);  // absent words: value 0
      s = block_sum(s, red);
      for (int i = begin + threadIdx.x; i < end; i += kThreads)
        st_relaxed_u64(out + i, flagged_word(value_of(ld_relaxed_u64(in + i)) + (s >= 0.0f ? 1.0f : 2.0f), uint32_t(e + 1)));
    }
    return;
  }
  for (int e = 0; e < a.edges; ++e) {
    if (a.n > 0) {
      const float* in = a.vec + size_t(e & 1) * size_t(a.n);
      float* out = a.vec + size_t((e + 1) & 1) * size_t(a.n);
      float s = 0.0f;
      for (int i = threadIdx.x; i < a.n; i += kThreads) s += __ldcg(in + i);
      s = block_sum(s, red);  // every element >= 0: s >= 0, so the add below is always 1
      for (int i = begin + threadIdx.x; i < end; i += kThreads) __stcg(out + i, __ldcg(in + i) + (s >= 0.0f ? 1.0f : 2.0f));
    }
    signal_add(a.counter, 1u, a.ablate);
    wait_at_least(a.counter, uint32_t(ctas) * uint32_t(e + 1), a.ablate);
  }
}

}  // namespace megaqwen::cuda::mk

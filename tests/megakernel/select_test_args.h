// The token selection's parameters (mk::SelectTestArgs) for a SamplingParams, as CudaEngine hands
// them to the megakernel: shared by the GPU selection tests (tests/cuda) and their host-emulated
// twins (tests/simt). Plain C++: layout.h has no CUDA types.
#pragma once

#include <cstdint>

#include "megaqwen/cuda/megakernel/layout.h"
#include "megaqwen/sampling/sampler.h"

namespace megaqwen::test {

// Sampling parameters in one line: temperature, top-k, top-p, min-p, repetition / presence /
// frequency penalties, seed.
inline SamplingParams sampling_params(float temperature, int top_k, float top_p, float min_p, float repetition,
                                      float presence, float frequency, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = repetition;
  p.presence_penalty = presence;
  p.frequency_penalty = frequency;
  p.seed = seed;
  return p;
}

inline cuda::mk::SelectTestArgs select_args(const float* logits, const SamplingParams& p, const int32_t* counts,
                                            uint64_t step) {
  cuda::mk::SelectTestArgs a;
  a.logits = logits;
  const bool top_k_on = !p.greedy() && p.top_k > 0;
  const bool cuts = p.top_p < 1.0f || p.min_p > 0.0f;
  a.temperature = p.greedy() ? 1.0f : p.temperature;
  a.gumbel = !p.greedy() && !top_k_on && !cuts;
  a.nucleus = !p.greedy() && !top_k_on && cuts;
  a.top_k = top_k_on ? p.top_k : 0;
  a.top_p = p.top_p;
  a.min_p = p.min_p;
  a.seed = p.seed;
  a.step = step;
  const bool penalties = p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  a.counts = penalties ? counts : nullptr;
  a.repetition_penalty = p.repetition_penalty;
  a.presence_penalty = p.presence_penalty;
  a.frequency_penalty = p.frequency_penalty;
  return a;
}

// Greedy over the raw logits.
inline cuda::mk::SelectTestArgs greedy_select(const float* logits) {
  cuda::mk::SelectTestArgs a;
  a.logits = logits;
  return a;
}

}  // namespace megaqwen::test

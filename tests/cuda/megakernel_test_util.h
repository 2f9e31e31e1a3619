// What the megakernel tests of both CUDA engines share (megakernel_test.cpp: Qwen3 on CudaEngine;
// hybrid_megakernel_test.cpp: Qwen3.5 on CudaHybridEngine): a run of the kernel with every step's raw
// logits, and the teacher-forced comparison of those logits with another engine's decode steps.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "engine/hf_fixture.h"
#include "megaqwen/cuda/megakernel/runner.h"
#include "megaqwen/sampling/sampler.h"

namespace megaqwen::test {

// Skips unless the megakernel applies to `model` on this GPU (and says why not).
#define MQ_REQUIRE_MEGAKERNEL(model)                                                                  \
  do {                                                                                                \
    MQ_REQUIRE_GPU_AND_CUBLAS();                                                                      \
    const std::string mq_mk_why_ = cuda::mk::Megakernel::unsupported_reason((model)->config, 0);     \
    if (!mq_mk_why_.empty()) GTEST_SKIP() << "megakernel not applicable: " << mq_mk_why_;            \
  } while (0)

// A megakernel within 1e-3 of the largest logit between its top two ids is a near-tie that
// summation order may flip.
constexpr double kNearTie = 1e-3;

inline SamplingParams greedy_params() {
  SamplingParams p;
  p.temperature = 0;
  return p;
}

struct MkRun {
  std::vector<int32_t> tokens;
  std::vector<float> logits;          // [n, V]
  std::vector<TokenLogprob> scored;   // with logprobs: each draw's, from the kernel
};

// Runs the megakernel for n draws after feeding `first` (engine.megakernel_generate), returning the
// drawn tokens, every step's logits and, with logprobs >= 0, each draw's log-probabilities.
template <class E>
MkRun run_megakernel(E& gpu, int32_t first, int n, const SamplingParams& params = greedy_params(),
                     const std::vector<int32_t>& history = {}, int logprobs = kNoLogprobs) {
  const size_t V = size_t(gpu.config().vocab_size);
  auto logits = poisoned_f32(size_t(n) * V);
  // The poison is a cudaMemset on the legacy stream, which the engine's non-blocking stream does not
  // wait for: let it land before the kernel writes the logits.
  CUDA_CHECK(cudaDeviceSynchronize());
  MkRun r;
  const int drawn = gpu.megakernel_generate(first, n, {}, params, history, logprobs, [&](const DeviceDraw& d) {
    r.tokens.push_back(d.token);
    EXPECT_EQ(d.logprob.has_value(), logprobs >= 0);
    if (d.logprob) r.scored.push_back(*d.logprob);
    return true;
  }, logits.data());
  EXPECT_EQ(drawn, n);
  r.logits = download(logits, size_t(drawn) * V);
  return r;
}

inline std::span<const float> logit_row(const std::vector<float>& all, size_t i, size_t V) { return {all.data() + i * V, V}; }

// Top-2 gap of a logit row, relative to its largest magnitude.
inline double top2_gap(std::span<const float> l) {
  float a = -INFINITY, b = -INFINITY, big = 0;
  for (float v : l) {
    big = std::max(big, std::abs(v));
    if (v > a) b = a, a = v;
    else if (v > b) b = v;
  }
  return big > 0 ? double(a - b) / big : 0.0;
}

// Feeds `first` then tokens[0..n-2] to `other` with decode() and compares each step's logits with
// the megakernel's. Returns the worst relative error; counts argmax disagreements that are not near-ties.
template <class E>
double compare_teacher_forced(E& other, int32_t first, const MkRun& mk, size_t V, int* hard_mismatches) {
  double worst = 0;
  *hard_mismatches = 0;
  for (size_t i = 0; i < mk.tokens.size(); ++i) {
    const int32_t in = i == 0 ? first : mk.tokens[i - 1];
    auto got = other.decode(in);
    std::vector<float> ref(got.begin(), got.end());
    worst = std::max(worst, relative_max_error(logit_row(mk.logits, i, V), ref));
    if (argmax(ref) != mk.tokens[i] && top2_gap(ref) >= kNearTie) ++*hard_mismatches;
  }
  return worst;
}

}  // namespace megaqwen::test

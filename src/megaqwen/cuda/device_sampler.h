// DeviceSampler: the next token drawn where the logits are, so only its id crosses to the host. Both
// CUDA engines (CudaEngine, CudaHybridEngine) sample through it; the rules are Engine::sample_on_device's.
//
// Greedy is a two-pass argmax; plain temperature sampling is the argmax of l / T + Gumbel noise (a
// draw from softmax(l / T)); top-k (up to kSampleCandidates) with top-p / min-p is the filtered
// sampler; top-p / min-p without a top-k is the exact nucleus sampler. Penalties need the history's
// counts on the device: kept incrementally while the history only grows (one token per step).
// Log-probabilities of the drawn token (log_softmax of the raw logits, with up to kMaxTopLogprobs
// alternatives) come from the megakernel's logprob reduction run alone (mk::launch_token_logprobs):
// a few kilobytes cross to the host instead of the logits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "megaqwen/cuda/device_buffer.h"
#include "megaqwen/cuda/megakernel/layout.h"
#include "megaqwen/engine/engine.h"
#include "megaqwen/sampling/sampler.h"

namespace megaqwen::cuda {

class DeviceSampler {
 public:
  DeviceSampler() = default;
  DeviceSampler(int vocab_size, cudaStream_t stream);

  // A draw from logits [V] (device memory, written by work already on `stream`) with `params`;
  // `history`'s length keys the random draw; with logprobs >= 0 (Engine::sample_on_device) the draw
  // is scored. nullopt: these params need the host Sampler (a top-k above kSampleCandidates, or
  // top-p / min-p over a vocabulary beyond the nucleus sampler's).
  std::optional<DeviceDraw> sample(const float* logits, const SamplingParams& params, std::span<const int32_t> history,
                                   int logprobs);

 private:
  void update_penalty_counts(std::span<const int32_t> history);
  void score(const float* logits, int top, int blocks);

  int vocab_ = 0;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer<uint64_t> argmax_partial_;  // [kArgmaxMaxBlocks]
  DeviceBuffer<float> scratch_;            // [V], the filtered samplers' transformed logits
  DeviceBuffer<int32_t> counts_;           // [V] occurrences in the history (penalties)
  DeviceBuffer<int32_t> history_ids_;      // ids still to be counted
  DeviceBuffer<int32_t> sampled_;          // [1]
  std::vector<int32_t> counted_;           // the history counts_ holds
  PinnedBuffer<int32_t> host_token_;       // [1]
  // Log-probabilities (allocated on first use): the reduction's parts and ticket, the record.
  DeviceBuffer<float> lp_lse_, lp_cand_v_;
  DeviceBuffer<int32_t> lp_cand_i_, lp_cand_n_;
  DeviceBuffer<uint32_t> lp_ticket_;
  DeviceBuffer<mk::LogprobRecord> lp_record_;
  PinnedBuffer<mk::LogprobRecord> host_record_;
};

}  // namespace megaqwen::cuda

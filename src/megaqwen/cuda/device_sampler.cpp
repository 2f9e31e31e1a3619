#include "megaqwen/cuda/device_sampler.h"

#include <algorithm>

#include "megaqwen/cuda/cuda_check.h"
#include "megaqwen/cuda/kernels.h"
#include "megaqwen/cuda/megakernel/megakernel.h"
#include "megaqwen/util/error.h"

namespace megaqwen::cuda {

DeviceSampler::DeviceSampler(int vocab_size, cudaStream_t stream)
    : vocab_(vocab_size), stream_(stream), argmax_partial_(size_t(kArgmaxMaxBlocks)), sampled_(1), host_token_(1) {}

// counts_[id] = occurrences of id in `history`; updated incrementally when the history only grew.
void DeviceSampler::update_penalty_counts(std::span<const int32_t> history) {
  const int V = vocab_;
  if (counts_.size() == 0) {
    counts_.resize(size_t(V));
    CUDA_CHECK(cudaMemsetAsync(counts_.data(), 0, counts_.bytes(), stream_));
    counted_.clear();
  }
  const bool extends =
      history.size() >= counted_.size() && std::equal(counted_.begin(), counted_.end(), history.begin());
  size_t from = counted_.size();
  if (!extends) {
    CUDA_CHECK(cudaMemsetAsync(counts_.data(), 0, counts_.bytes(), stream_));
    counted_.clear();
    from = 0;
  }
  std::vector<int32_t> fresh;
  for (size_t i = from; i < history.size(); ++i)
    if (history[i] >= 0 && history[i] < V) fresh.push_back(history[i]);  // as the CPU Sampler: skip bad ids
  counted_.assign(history.begin(), history.end());
  if (fresh.empty()) return;
  if (history_ids_.size() < fresh.size()) history_ids_.resize(std::max(fresh.size(), size_t(4096)));
  CUDA_CHECK(cudaMemcpyAsync(history_ids_.data(), fresh.data(), fresh.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                             stream_));
  count_tokens(history_ids_.data(), int(fresh.size()), counts_.data(), stream_);
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // `fresh` is pageable and goes away
}

std::optional<DeviceDraw> DeviceSampler::sample(const float* logits, const SamplingParams& params,
                                                std::span<const int32_t> history, int logprobs) {
  params.validate();
  const int V = vocab_;
  if (logprobs > kMaxTopLogprobs) fail("logprobs asks for {} alternatives; 0 .. {} are possible", logprobs, kMaxTopLogprobs);
  const int lp_blocks = mk::token_logprob_blocks(V), lp_cap = mk::kThreads * mk::kSelPerThread;
  if (logprobs >= 0 && ((V + lp_blocks - 1) / lp_blocks > lp_cap || lp_blocks * logprobs > lp_cap)) return std::nullopt;
  LogitTransform t;
  t.seed = params.seed;
  t.step = history.size();
  if (params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
    update_penalty_counts(history);
    t.counts = counts_.data();
    t.repetition_penalty = params.repetition_penalty;
    t.presence_penalty = params.presence_penalty;
    t.frequency_penalty = params.frequency_penalty;
  }
  const bool filtered = (params.top_k > 0 && params.top_k < V) || params.top_p < 1.0f || params.min_p > 0.0f;
  // A top-k above the device sampler's candidate count normalizes over the k on the CPU, which the
  // device cannot reproduce, and the nucleus sampler's fixed point has a vocabulary limit: the host
  // Sampler serves those (nullopt: the caller decodes to the host).
  if (!params.greedy() && params.top_k > kSampleCandidates && params.top_k < V) return std::nullopt;
  const bool top_k_off = params.top_k <= 0 || params.top_k >= V;
  if (!params.greedy() && filtered && top_k_off && V >= kNucleusMaxVocab) return std::nullopt;
  if (params.greedy()) {
    argmax(logits, V, t, argmax_blocks(V), argmax_partial_.data(), sampled_.data(), stream_);
  } else if (!filtered) {
    t.temperature = params.temperature;
    t.gumbel = true;  // argmax(l / T + Gumbel) is a draw from softmax(l / T)
    argmax(logits, V, t, argmax_blocks(V), argmax_partial_.data(), sampled_.data(), stream_);
  } else {
    t.temperature = params.temperature;
    if (scratch_.size() == 0) scratch_.resize(size_t(V));
    sample_filtered(logits, V, t, {params.top_k, params.top_p, params.min_p}, scratch_.data(), sampled_.data(),
                    stream_);
  }
  if (logprobs >= 0) score(logits, logprobs, lp_blocks);
  CUDA_CHECK(cudaMemcpyAsync(host_token_.data(), sampled_.data(), sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  DeviceDraw draw{host_token_.data()[0], std::nullopt};
  if (logprobs >= 0) {
    const mk::LogprobRecord& r = host_record_.data()[0];
    TokenLogprob scored{draw.token, r.logprob, {}};
    for (int i = 0; i < std::clamp(r.n, 0, mk::kMaxLogprobTop); ++i) scored.top.push_back({r.ids[i], r.logprobs[i]});
    draw.logprob = std::move(scored);
  }
  return draw;
}

// Enqueues the log-probabilities of the token in sampled_ (its record lands in host_record_).
void DeviceSampler::score(const float* logits, int top, int blocks) {
  if (lp_record_.size() == 0) {
    lp_lse_.resize(2 * size_t(mk::kMaxLogprobBlocks));
    lp_cand_v_.resize(size_t(mk::kMaxLogprobBlocks) * mk::kMaxLogprobTop);
    lp_cand_i_.resize(size_t(mk::kMaxLogprobBlocks) * mk::kMaxLogprobTop);
    lp_cand_n_.resize(size_t(mk::kMaxLogprobBlocks));
    lp_ticket_.resize(1);
    lp_record_.resize(1);
    host_record_ = PinnedBuffer<mk::LogprobRecord>(1);
  }
  CUDA_CHECK(cudaMemsetAsync(lp_ticket_.data(), 0, lp_ticket_.bytes(), stream_));
  mk::LogprobArgs a;
  a.logits = logits;
  a.V = vocab_;
  a.token = sampled_.data();
  a.top = top;
  a.parts = {lp_lse_.data(), lp_cand_v_.data(), lp_cand_i_.data(), lp_cand_n_.data()};
  a.ticket = lp_ticket_.data();
  a.out = lp_record_.data();
  mk::launch_token_logprobs(a, blocks, stream_);
  CUDA_CHECK(cudaMemcpyAsync(host_record_.data(), lp_record_.data(), sizeof(mk::LogprobRecord), cudaMemcpyDeviceToHost,
                             stream_));
}

}  // namespace megaqwen::cuda

// Megakernel: the host side of the decode megakernel for one CUDA engine (CudaEngine, CudaHybridEngine). Owns the launch workspace
// (per-layer activations, attention partials, counters) and the mapped-memory mailbox through which
// drawn tokens reach the host while the kernel runs; launches one persistent kernel (one CTA per SM)
// per run of up to kLaunchTokenCap tokens and polls the mailbox, handing each token to the caller
// as it appears (no launch, memset or sync per token).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "megaqwen/cuda/cuda_stream.h"
#include "megaqwen/cuda/device_buffer.h"
#include "megaqwen/cuda/megakernel/megakernel.h"
#include "megaqwen/model/config.h"
#include "megaqwen/sampling/logprobs.h"
#include "megaqwen/sampling/sampler.h"

namespace megaqwen::cuda::mk {

// MEGAQWEN_MK_PROBE (layout.h, kProbe*): "no-waits", "no-weights" or both joined by a comma. The
// no-waits probe skips the counter waits, so it is refused with flagged vectors (whose readers poll
// the data itself). Throws megaqwen::Error naming the bad value.
uint32_t parse_probe(const std::string& value, bool flagged_vectors);
std::string probe_name(uint32_t probe);  // "no-waits,no-weights"
// MEGAQWEN_MK_MLP: "two-stage" (false, the default) or "one-stage" (true: stage_mlp_one_stage.cuh).
// Throws megaqwen::Error naming the bad value.
bool parse_mlp_form(const std::string& value);

// What the kernel reads and writes of one engine, in the GPU layout both paths share: per layer its
// weights, KV cache rows and (DeltaNet layers) states; the embedding, the LM head, the final norm and
// the RoPE frequencies. The engine keeps every buffer alive as long as the Megakernel.
struct Binding {
  std::vector<LayerWeights> layers;  // [L], host copy (uploaded by the constructor)
  const uint16_t* embed = nullptr;
  const uint16_t* lm_head = nullptr;
  const float* final_norm = nullptr;
  const float* inv_freq = nullptr;
  uint64_t delta_layers = 0;  // bit l: layer l is a Gated DeltaNet layer
  int context = 0;            // rows of each layer's KV cache
};

struct RunRequest {
  int32_t token = 0;                    // fed first, at the position given to run()
  int max_tokens = 1;                   // draws at most this many (the caller keeps them within the context)
  std::span<const int32_t> eos_ids;     // a drawn token among these ends the run (at most kMaxEos)
  float temperature = 1.0f;             // 1, gumbel and nucleus off and top_k 0: greedy
  bool gumbel = false;                  // argmax(l / T + Gumbel): a draw from softmax(l / T)
  int top_k = 0;                        // 1..kMaxTopK: filtered draw (top_p, min_p); gumbel must be off
  bool nucleus = false;                 // top_p / min_p over the whole vocabulary; top_k 0, gumbel off
  float top_p = 1.0f, min_p = 0.0f;
  uint64_t seed = 0, step = 0;          // draw keys: (seed, step + i, ...) for the i-th draw
  // Penalties (any non-neutral value turns them on): occurrences counted over `history` (read before
  // the first on_token call), plus every drawn token.
  float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  std::span<const int32_t> history;
  float* logits_out = nullptr;          // tests: device [max_tokens, V] raw logits of every step, or null
  // Log-probabilities of every drawn token (logprob.cuh): -1 none, else its own with this many
  // alternatives (0..kMaxTopLogprobs), handed to on_token with the token.
  int logprobs = -1;
};

// Called per drawn token as soon as the host sees it, with its log-probabilities when the request
// asked for them (else null); false asks the kernel to stop.
using TokenSink = std::function<bool(int32_t token, const TokenLogprob* logprob)>;

class Megakernel {
 public:
  // Empty when the megakernel can run `config` on `device`; otherwise the reason, in one line.
  static std::string unsupported_reason(const ModelConfig& config, int device);
  // Empty when the kernel's filtered selection serves top_k here; otherwise why not (one line).
  std::string filter_unsupported_reason(int top_k) const;
  // Empty when run() draws with `params` as the per-operator device sampler would; otherwise why not.
  std::string sampling_unsupported_reason(const SamplingParams& params) const;
  // Empty when the kernel reports log-probabilities with `top` alternatives; otherwise why not.
  std::string logprob_unsupported_reason(int top) const;
  // The request that draws as the per-operator device sampler would with `params` (the draws keyed
  // from history.size(), the penalties counting `history`), feeding `token` first.
  static RunRequest request_for(const SamplingParams& params, int vocab, int32_t token, int max_tokens,
                                std::span<const int32_t> eos_ids, std::span<const int32_t> history);

  Megakernel(const ModelConfig& config, Binding binding, int device, cudaStream_t stream);
  ~Megakernel();
  Megakernel(const Megakernel&) = delete;
  Megakernel& operator=(const Megakernel&) = delete;

  // Feeds req.token at position `pos`, then every drawn token but the last, calling on_token(id) per
  // drawn token as soon as the host sees it; on_token returning false asks the kernel to stop (it may
  // have run ahead a few tokens: their cache rows are beyond the returned count and are overwritten
  // later). Returns the number of tokens drawn and delivered (= tokens appended to the cache).
  int run(int pos, const RunRequest& req, const TokenSink& on_token);

  int ctas() const { return ctas_; }
  uint64_t launches() const { return launches_; }  // kernel launches so far
  uint32_t ablate() const { return ablate_; }       // kAblate* bits in effect (0: none)
  bool flagged_vectors() const { return flagged_; }  // MEGAQWEN_MK_VECTORS=flagged
  bool one_stage_mlp() const { return one_stage_mlp_; }  // MEGAQWEN_MK_MLP=one-stage
  uint32_t probe() const { return probe_; }          // kProbe* bits (MEGAQWEN_MK_PROBE; 0: none)
  std::string describe() const;  // "megakernel qwen3-0.6b, 132 CTAs x 512 threads, 210 KB shared memory"
  // With MEGAQWEN_MK_TIMING builds: the per-stage breakdown summed over every run so far (ns per token).
  std::string timing_report() const;

 private:
  std::string top_k_capacity_reason(int k, const std::string& what) const;
  int launch_once(int pos, const RunRequest& req, int32_t token, int max_tokens, uint64_t step, float* logits_out,
                  const TokenSink& on_token, bool* host_stopped, bool* kernel_finished);
  // Deadlock diagnosis (MEGAQWEN_MK_WATCHDOG_S, default 20 s without a new token): reads the counters
  // while the kernel runs (a copy on a second stream), prints them against the targets of token t;
  // returns 2 for a first look (table printed), 1 if they moved since `previous` (slow, not stuck:
  // e.g. under compute-sanitizer), 0 if they did not (deadlock).
  int dump_counters(int t, std::vector<uint32_t>* previous);

  PinnedBuffer<uint32_t> counters_host_;  // watchdog copy of the counters
  CudaStream watch_stream_;               // non-blocking: copies while the kernel runs

  Shape shape_;
  KernelInfo info_{};
  int ctas_ = 0, context_ = 0, vocab_ = 0, groups_ = 0;
  float eps_ = 0, scale_log2_ = 0;
  cudaStream_t stream_ = nullptr;
  Binding binding_;
  DeviceBuffer<LayerWeights> layers_;
  DeviceBuffer<float> x_, xmid_, qkv_, attn_, act_, partial_o_, partial_ml_, best_v_;
  // Flagged vectors (MEGAQWEN_MK_VECTORS=flagged; layout.h, Params::x_words); qkv and the attention's
  // in the Qwen3 configs only.
  DeviceBuffer<uint64_t> x_words_, xmid_words_, act_words_, qkv_words_, partial_o_words_, partial_ml_words_, attn_words_;
  // The one-stage MLP (MEGAQWEN_MK_MLP=one-stage; layout.h, Params::x_fixed): every layer's down^T
  // and the fixed-point sums of the down products (two halves by token parity).
  DeviceBuffer<uint16_t> down_t_;
  DeviceBuffer<unsigned long long> x_fixed_;
  DeviceBuffer<int32_t> best_i_, tokens_;
  DeviceBuffer<int32_t> counts_, history_;        // penalties (allocated on first use)
  DeviceBuffer<float> sel_vals_, cand_v_;         // filtered selection (allocated on first use)
  DeviceBuffer<int32_t> cand_i_, cand_n_;
  DeviceBuffer<float> lp_raw_, lp_lse_, lp_cand_v_;  // log-probabilities (allocated on first use)
  DeviceBuffer<int32_t> lp_cand_i_, lp_cand_n_;
  DeviceBuffer<uint32_t> counters_;
  DeviceBuffer<unsigned long long> timing_;
  struct FreeHost {
    void operator()(void* m) const { cudaFreeHost(m); }
  };
  // cudaHostAlloc(mapped), owned: a constructor that throws after allocating it frees it.
  std::unique_ptr<Mailbox, FreeHost> mailbox_host_;
  Mailbox* mailbox_dev_ = nullptr;
  std::unique_ptr<LogprobRecord[], FreeHost> records_host_;  // [kLaunchTokenCap], mapped; first logprob run
  LogprobRecord* records_dev_ = nullptr;
  int splits_ = 1;
  int merge_splits_ = kMergeInOProjMaxSplits;  // Params::merge_splits (MEGAQWEN_MK_MERGE_SPLITS)
  bool flagged_ = false;  // MEGAQWEN_MK_VECTORS=flagged: x, xmid and act as flagged words (layout.h, Params::x_words)
  bool one_stage_mlp_ = false;  // MEGAQWEN_MK_MLP=one-stage
  uint32_t ablate_ = 0;  // MEGAQWEN_MK_ABLATE (layout.h, kAblate*): optimizations switched back, for benchmarks
  uint32_t probe_ = 0;   // MEGAQWEN_MK_PROBE (layout.h, kProbe*): timing probes, meaningless tokens
  double watchdog_s_ = 20.0;  // MEGAQWEN_MK_WATCHDOG_S: seconds without a new token before the counter dump (0: off)
  uint64_t timed_tokens_ = 0;
  uint64_t launches_ = 0;
  std::vector<unsigned long long> timing_sum_;
};

}  // namespace megaqwen::cuda::mk

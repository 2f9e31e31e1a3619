// CudaEngine: the Qwen3 forward pass on one NVIDIA GPU, operator by operator.
//
// Prefill (a batch of tokens, chunked): cuBLAS bf16 GEMMs with fp32 accumulation for every linear
// layer, own kernels for RMSNorm, QK-norm + RoPE + KV append, causal flash attention (bf16 tensor
// cores by default, tensor_core_prefill) and SwiGLU.
// The residual stream and every activation stay fp32; a GEMM input is passed as the two-term bf16
// split hi + lo (two GEMMs, ~16 significant bits, close to fp32) unless split_activations is off.
// Decode (one token): bf16 GEMV kernels with fp32 input vectors, fused QK-norm/RoPE/append,
// split-KV attention (flash-decoding) and the LM head, captured once as a CUDA graph that reads the
// token and its position from device memory, so one graph serves every step.
// The KV cache is bf16 [layer, position, kv_head, D], sized from the requested context.
// Sampling runs on the device (sample_on_device): only the token id (and, when asked for, its
// log-probabilities) is copied back.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "megaqwen/cuda/cublas_gemm.h"
#include "megaqwen/cuda/cuda_stream.h"
#include "megaqwen/cuda/cuda_weights.h"
#include "megaqwen/cuda/device_buffer.h"
#include "megaqwen/cuda/device_sampler.h"
#include "megaqwen/cuda/device_setup.h"
#include "megaqwen/cuda/decode_step.h"
#include "megaqwen/cuda/megakernel_decoder.h"
#include "megaqwen/engine/engine.h"
#include "megaqwen/model/model.h"

namespace megaqwen::cuda {

struct CudaEngineOptions {
  int context = 0;                // KV cache capacity; 0: min(the model's context limit, 4096)
  int device = 0;                 // CUDA device index
  int prefill_chunk = 1024;       // tokens per prefill pass (activation memory grows with it)
  bool split_activations = true;  // prefill GEMM inputs as bf16 hi + lo (false: bf16 only, half the GEMM work)
  bool use_graph = true;          // replay the decode step as a CUDA graph (false: launch kernel by kernel)
  bool tensor_core_prefill = true;  // prefill attention on bf16 tensor cores (false: the fp32 kernel)
  DecodeKernel decode_kernel = DecodeKernel::Auto;
  bool chunked_delta_rule = true;  // Qwen3.5 prefill: the DeltaNet in chunks of 32 tokens (false: token by token)
};

// Bytes the engine needs on the device for `model` and `options` (weights, KV cache, buffers).
CudaMemoryPlan plan_cuda_memory(const Model& model, const CudaEngineOptions& options);

class CudaEngine final : public Engine {
 public:
  CudaEngine(std::shared_ptr<const Model> model, CudaEngineOptions options = {});
  ~CudaEngine() override;

  const ModelConfig& config() const override { return model_->config; }
  std::string device_name() const override { return device_name_; }
  int context_size() const override { return context_; }
  int position() const override { return position_; }

  std::span<const float> prefill(std::span<const int32_t> tokens) override;
  void prefill_all_logits(std::span<const int32_t> tokens, std::vector<float>& out) override;
  std::span<const float> decode(int32_t token) override;
  void truncate(int n) override;
  void fill_cache_with_noise(int n) override;
  uint64_t kv_bytes_per_token() const override;
  std::unique_ptr<EngineState> save_state() override;
  void restore_state(const EngineState& state) override;
  std::string state_format() const override;
  std::vector<StateTensor> state_tensors(const EngineState& state) const override;
  std::unique_ptr<EngineState> state_from_tensors(std::span<const int32_t> tokens,
                                                  const StateTensorSource& source) const override;
  StateMemory state_memory() const override { return StateMemory::Device; }
  std::optional<uint64_t> state_memory_available() const override;

  std::optional<DeviceDraw> sample_on_device(const SamplingParams& params, std::span<const int32_t> history,
                                             int logprobs) override;
  void decode_only(int32_t token) override;
  // The megakernel path (when chosen): greedy, temperature sampling (Gumbel-max), top-k up to
  // mk::kMaxTopK with top-p / min-p, top-p / min-p without a top-k, and the penalties with any of
  // them. A top_k above mk::kMaxTopK (below the vocabulary) returns nullopt: the per-operator path
  // serves it.
  std::optional<int> generate_on_device(int32_t token, int max_tokens, std::span<const int32_t> eos_ids,
                                        const SamplingParams& params, std::span<const int32_t> history, int logprobs,
                                        const DrawSink& on_draw) override;
  // Why generate_on_device would return nullopt for these params (empty: it would run them).
  std::string decode_profile() const override { return decoder_.profile() + step_.profile_report(); }
  // MEGAQWEN_PEROP_PROFILE: the per-operator step's kernel times (kernel_profile.h); null otherwise.
  const KernelProfile* decode_step_profile() const { return step_.profile(); }
  std::string megakernel_unsupported_reason(const SamplingParams& params) const;
  // As generate_on_device, for tests: also writes each step's raw logits to device memory
  // logits_out [max_tokens, V] (null: not written); fails if the megakernel is not in use.
  int megakernel_generate(int32_t token, int max_tokens, std::span<const int32_t> eos_ids, const SamplingParams& params,
                          std::span<const int32_t> history, int logprobs, const DrawSink& on_draw,
                          float* logits_out);
  bool uses_megakernel() const { return decoder_.active(); }
  const std::string& decode_kernel_note() const { return decoder_.note(); }  // what decodes, or why not the megakernel
  const mk::Megakernel* megakernel() const { return decoder_.megakernel(); }

  const CudaEngineOptions& options() const { return options_; }
  int decode_splits() const { return splits_; }
  cudaStream_t stream() const { return stream_; }
  // The latest logits, still on the device (tests).
  const float* device_logits() const { return logits_.data(); }

 private:
  struct SavedState;  // save_state()'s copy, on the device
  void forward_prefill(std::span<const int32_t> tokens, float* all_logits);
  void enqueue_decode_step();
  void run_decode_step(int32_t token);
  uint16_t* k_layer(int l) { return k_cache_.data() + size_t(l) * size_t(context_) * size_t(model_->config.kv_dim()); }
  uint16_t* v_layer(int l) { return v_cache_.data() + size_t(l) * size_t(context_) * size_t(model_->config.kv_dim()); }

  std::shared_ptr<const Model> model_;
  CudaEngineOptions options_;
  std::string device_name_;
  int context_ = 0, position_ = 0, chunk_ = 0, splits_ = 1;
  CudaStream owned_stream_;   // declared before everything that works on it: destroyed after them
  cudaStream_t stream_ = nullptr;  // owned_stream_.get()
  std::unique_ptr<CublasGemm> gemm_;  // created at the first prefill
  MegakernelDecoder decoder_;  // the megakernel, when chosen; per-operator decode otherwise
  CudaWeights weights_;

  DeviceBuffer<uint16_t> k_cache_, v_cache_;  // [L, context, kv_heads, D] bf16
  DeviceBuffer<float> inv_freq_;               // [D/2]
  // Prefill activations for a chunk of T <= chunk_ tokens.
  DeviceBuffer<int32_t> p_tokens_;                // [chunk]
  DeviceBuffer<float> p_x_, p_qkv_, p_q_, p_attn_, p_gu_;  // [T,H] [T,Q+2KV] [T,Q] [T,Q] [T,2I]
  DeviceBuffer<uint16_t> p_hi_, p_lo_;            // [T, max(H, Q, I)] bf16 split of a GEMM input
  DeviceBuffer<float> p_logits_;                  // [logit rows, V] for prefill_all_logits
  // Decode state: one token.
  DecodeStep step_;                 // token and position on the device, the captured graph, host logits
  DeviceBuffer<float> d_x_, d_qkv_, d_q_, d_attn_, d_act_;
  DeviceBuffer<float> partial_o_, partial_ml_;    // [heads, splits, D], [heads, splits, 2]
  DeviceBuffer<float> logits_;                    // [V]: the latest logits (prefill or decode)
  DeviceSampler sampler_;
};

}  // namespace megaqwen::cuda

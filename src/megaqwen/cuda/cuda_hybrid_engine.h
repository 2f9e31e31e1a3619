// CudaHybridEngine: the Qwen3.5 hybrid forward pass (Gated DeltaNet and gated full-attention layers)
// on one NVIDIA GPU, operator by operator: the GPU twin of CpuHybridEngine, tested against it.
//
// Prefill (chunked): cuBLAS GEMMs on the bf16 split of fp32 activations for every projection (row
// ranges of the stacked in_proj for the DeltaNet's qkv, z, b and a); the DeltaNet's causal conv, gated
// delta rule and gated RMSNorm kernels (kernels/gated_delta_net.cuh) walk the chunk in time order;
// the attention layers use the Qwen3 kernels with the q | gate | k | v layout, RoPE on the first
// rotary_dim dims, and the sigmoid output gate. Decode: one GEMV per projection group, the same
// kernels for one token, captured once as a CUDA graph (token and position read from device memory).
//
// State on the device: a bf16 KV cache for the attention layers only ([full layers, context,
// kv_heads, D]), and per DeltaNet layer the fp32 recurrent state [nv, dk, dv] and conv window
// [K-1, C]. truncate() restores a device snapshot of those states and replays token ids
// (recurrent_rollback.h), as CpuHybridEngine does. Whole runs of decode steps (generate_on_device) go
// to the decode megakernel where a compiled hybrid config matches (MegakernelDecoder; the per-operator
// graph otherwise), over the same weights, cache and states.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "megaqwen/cuda/cublas_gemm.h"
#include "megaqwen/cuda/cuda_engine.h"
#include "megaqwen/cuda/cuda_hybrid_weights.h"
#include "megaqwen/cuda/cuda_stream.h"
#include "megaqwen/cuda/device_buffer.h"
#include "megaqwen/cuda/device_sampler.h"
#include "megaqwen/cuda/device_setup.h"
#include "megaqwen/cuda/decode_step.h"
#include "megaqwen/engine/engine.h"
#include "megaqwen/engine/recurrent_rollback.h"
#include "megaqwen/model/model.h"

namespace megaqwen::cuda {

// Bytes the hybrid engine needs on the device for `model` and `options`.
CudaMemoryPlan plan_hybrid_memory(const Model& model, const CudaEngineOptions& options);

class CudaHybridEngine final : public Engine {
 public:
  // options.decode_kernel: as CudaEngine (Auto takes the megakernel where it applies).
  CudaHybridEngine(std::shared_ptr<const Model> model, CudaEngineOptions options = {});
  ~CudaHybridEngine() override;

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
  uint64_t state_bytes_per_step() const override { return 2 * (recurrent_.bytes() + conv_state_.bytes()); }
  std::optional<DeviceDraw> sample_on_device(const SamplingParams& params, std::span<const int32_t> history,
                                             int logprobs) override;
  void decode_only(int32_t token) override;
  // The megakernel path, as CudaEngine's: generate_on_device runs whole stretches of decode steps in
  // it (nullopt where it does not apply), megakernel_generate also writes each step's raw logits to
  // device memory logits_out [max_tokens, V] (tests). Every appended token is recorded for truncate().
  std::optional<int> generate_on_device(int32_t token, int max_tokens, std::span<const int32_t> eos_ids,
                                        const SamplingParams& params, std::span<const int32_t> history, int logprobs,
                                        const DrawSink& on_draw) override;
  std::string decode_profile() const override { return decoder_.profile() + step_.profile_report(); }
  // MEGAQWEN_PEROP_PROFILE: the per-operator step's kernel times (kernel_profile.h); null otherwise.
  const KernelProfile* decode_step_profile() const { return step_.profile(); }
  std::string megakernel_unsupported_reason(const SamplingParams& params) const;
  int megakernel_generate(int32_t token, int max_tokens, std::span<const int32_t> eos_ids, const SamplingParams& params,
                          std::span<const int32_t> history, int logprobs, const DrawSink& on_draw,
                          float* logits_out);
  bool uses_megakernel() const { return decoder_.active(); }
  const std::string& decode_kernel_note() const { return decoder_.note(); }
  const mk::Megakernel* megakernel() const { return decoder_.megakernel(); }

  std::vector<int> snapshot_positions() const { return rollback_.snapshot_positions(); }
  int64_t replayed_tokens() const { return rollback_.replayed_tokens(); }
  const CudaEngineOptions& options() const { return options_; }
  cudaStream_t stream() const { return stream_; }
  const float* device_logits() const { return logits_.data(); }  // the latest logits (tests)

 private:
  struct SavedState;  // save_state()'s copy, on the device
  struct DeviceStates {
    DeviceBuffer<float> recurrent, conv;
  };

  void forward_prefill(std::span<const int32_t> tokens, float* all_logits);
  void prefill_attention(const CudaHybridLayerWeights& w, int slot, int T, int p0, uint16_t* hi, uint16_t* lo);
  void prefill_delta_net(const CudaHybridLayerWeights& w, int slot, int T, uint16_t* hi, uint16_t* lo);
  void enqueue_decode_step();
  void run_decode_step(int32_t token);
  void remember_states();
  DeviceStates copy_states() const;
  DeviceStates clone_states(const DeviceStates& from) const;

  uint16_t* k_layer(int slot);
  uint16_t* v_layer(int slot);
  float* recurrent_state(int slot) { return recurrent_.data() + size_t(slot) * state_floats_; }
  float* conv_state(int slot) { return conv_state_.data() + size_t(slot) * conv_floats_; }

  std::shared_ptr<const Model> model_;
  CudaEngineOptions options_;
  std::string device_name_;
  int context_ = 0, position_ = 0, chunk_ = 0, splits_ = 1;
  std::vector<int> slot_;    // [L]: the layer's index among the layers of its type
  CudaStream owned_stream_;  // declared before everything that works on it: destroyed after them
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CublasGemm> gemm_;  // created at the first prefill
  MegakernelDecoder decoder_;         // the megakernel, when chosen; per-operator decode otherwise
  CudaHybridWeights weights_;

  DeviceBuffer<uint16_t> k_cache_, v_cache_;    // [full layers, context, kv_heads, D] bf16
  size_t state_floats_ = 0, conv_floats_ = 0;   // per DeltaNet layer: nv dk dv, (K - 1) C
  DeviceBuffer<float> recurrent_, conv_state_;  // [linear layers, ...]
  DeviceBuffer<float> inv_freq_;                // [rotary_dim / 2]
  RecurrentRollback<DeviceStates> rollback_;
  // Prefill activations for a chunk of T <= chunk_ tokens.
  DeviceBuffer<int32_t> p_tokens_;      // [T]
  DeviceBuffer<float> p_x_;             // [T, H] residual stream
  DeviceBuffer<float> p_mix_;           // [T, max(2Q + 2KV, C)]: q | gate | k | v, or the DeltaNet's qkv
  DeviceBuffer<float> p_q_, p_attn_;    // [T, Q]
  DeviceBuffer<float> p_z_, p_o_;       // [T, Vd]
  DeviceBuffer<float> p_b_, p_a_;       // [T, nv]
  DeviceBuffer<float> p_delta_work_;    // the chunked delta rule's workspace for T tokens
  DeviceBuffer<float> p_gu_;            // [T, 2I]
  DeviceBuffer<uint16_t> p_hi_, p_lo_;  // [T, max(H, Q, Vd, I)] bf16 split of a GEMM input
  DeviceBuffer<float> p_logits_;        // [kLogitRows, V] for prefill_all_logits
  // Decode: one token.
  DecodeStep step_;                 // token and position on the device, the captured graph, host logits
  DeviceBuffer<float> d_x_, d_proj_, d_q_, d_mix_out_, d_act_;
  DeviceBuffer<float> partial_o_, partial_ml_;
  DeviceBuffer<float> logits_;  // [V]: the latest logits (prefill or decode)
  DeviceSampler sampler_;
};

}  // namespace megaqwen::cuda

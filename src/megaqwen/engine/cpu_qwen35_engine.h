// CpuHybridEngine: the Qwen3.5 hybrid forward pass (Gated DeltaNet layers and gated full-attention
// layers, per config layer_types) in fp32 on the CPU. Like CpuEngine it is the oracle later engines are
// tested against, so forward_chunk() reads like the math in ../shared/docs/qwen-models.md section 2,
// one function per step, and the operations are cpu_ops.h's.
//
// The cache of one sequence has three parts:
//   - full-attention layers: k (after norm and RoPE) and v per position, [full layers, context, kv_heads, D];
//   - DeltaNet layers: the recurrent state S per value head, [linear layers, nv, key dim, value dim],
//     fp32, and the conv state, the last K-1 pre-conv inputs of every q|k|v channel.
// The first part is indexed by position, so rolling it back is free. The DeltaNet states are not: they
// summarize every token so far. truncate(n) restores a snapshot of the states and replays tokens
// (recurrent_rollback.h); snapshots are taken at the end of every prefill call and after a replay.
#pragma once

#include <memory>
#include <vector>

#include "megaqwen/engine/cpu_engine.h"
#include "megaqwen/engine/engine.h"
#include "megaqwen/engine/recurrent_rollback.h"
#include "megaqwen/engine/recurrent_state_tensors.h"
#include "megaqwen/model/model.h"
#include "megaqwen/util/thread_pool.h"

namespace megaqwen {

class CpuHybridEngine final : public Engine {
 public:
  using States = HostRecurrentStates;  // recurrent_state_tensors.h
  static constexpr size_t kMaxSnapshots = RecurrentRollback<States>::kMaxSnapshots;

  CpuHybridEngine(std::shared_ptr<const Model> model, CpuEngineOptions options = {});

  const ModelConfig& config() const override { return model_->config; }
  std::string device_name() const override;
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
  uint64_t state_bytes_per_step() const override { return 2 * (recurrent_.size() + conv_state_.size()) * sizeof(float); }

  // Positions with a stored snapshot of the DeltaNet states, ascending (for tests and stats).
  std::vector<int> snapshot_positions() const { return rollback_.snapshot_positions(); }
  // Tokens replayed by truncate() since construction (for tests: a rollback that lands on a snapshot
  // replays nothing).
  int64_t replayed_tokens() const { return rollback_.replayed_tokens(); }
  // The DeltaNet states now (for tests: the GPU paths keep the same layouts): recurrent
  // [linear layers, nv, key dim, value dim], conv [linear layers, K - 1, conv dim].
  std::span<const float> recurrent_states() const { return recurrent_; }
  std::span<const float> conv_states() const { return conv_state_; }

 private:

  // Runs `tokens` at positions position_.. and advances position_; logits of every token to
  // `all_logits` when given, the last token's to logits_.
  void forward(std::span<const int32_t> tokens, float* all_logits);
  void forward_chunk(std::span<const int32_t> tokens, float* all_logits);
  void project(const WeightMatrix& w, const float* in, int64_t tokens, float* out) {
    products_.run(w, in, tokens, out, pool_);
  }

  // The layer steps over a chunk of T tokens; `h` is the normed input [T, H], `out` the block output [T, H].
  void gated_attention(const Qwen35FullAttentionWeights& w, int slot, const float* h, int64_t T, float* out);
  void gated_delta_net(const Qwen35LinearAttentionWeights& w, int slot, const float* h, int64_t T, float* out);
  void swiglu_mlp(const Qwen35LayerWeights& w, const float* h, int64_t T, float* out);

  void remember_states();  // snapshot of the DeltaNet states at position_
  float* recurrent_state(int slot) { return &recurrent_[size_t(slot) * state_floats_]; }
  float* conv_state(int slot) { return &conv_state_[size_t(slot) * conv_floats_]; }

  std::shared_ptr<const Model> model_;
  const Qwen35Weights& weights_;
  ThreadPool pool_;
  bool bf16_kv_cache_ = false;
  CpuProducts products_;
  bool weights_in_huge_pages_ = false;
  int context_ = 0;
  int position_ = 0;
  std::vector<int> slot_;            // [L]: the layer's index among the layers of its type
  std::vector<float> inv_freq_;      // [rotary_dim / 2] RoPE frequencies
  std::vector<float> k_cache_;       // [full layers, context, kv_heads, D]: k after norm and RoPE
  std::vector<float> v_cache_;       // [full layers, context, kv_heads, D]
  size_t state_floats_ = 0;          // per DeltaNet layer: nv * key dim * value dim
  size_t conv_floats_ = 0;           // per DeltaNet layer: (K - 1) * C
  std::vector<float> recurrent_;     // [linear layers, nv, key dim, value dim]: S[i][j], key i, value j
  std::vector<float> conv_state_;    // [linear layers, K - 1, C]: the last K-1 pre-conv inputs, oldest first
  RecurrentRollback<States> rollback_;  // token ids and snapshots for truncate()
  std::vector<float> logits_;        // [V]
};

}  // namespace megaqwen

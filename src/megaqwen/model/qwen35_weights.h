// Qwen35Weights: typed, shape-checked views of a Qwen3.5 hybrid checkpoint's language model (no
// copies). Each layer has a token mixer (Gated DeltaNet or gated full attention, per config
// layer_types) and a SwiGLU MLP. Each tensor keeps the dtype its header gives: published checkpoints
// store linear_attn.A_log and linear_attn.norm.weight in float32 and the rest in bf16.
//
// Names: model.language_model.* in Qwen3_5ForConditionalGeneration folders, model.* in qwen3_5_text
// ones (Qwen3_5ForCausalLM). The vision tower (model.visual.*) and the multi-token-prediction head
// (mtp.*) are not bound; their tensors are counted so `megaqwen info` can say what was skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "megaqwen/model/checkpoint.h"
#include "megaqwen/model/config.h"
#include "megaqwen/model/qwen3_weights.h"

namespace megaqwen {

// Gated full attention (transformers' Qwen3_5Attention). D = head_dim.
struct Qwen35FullAttentionWeights {
  WeightMatrix q;        // [heads * 2D, H]: per head D query rows, then D gate rows (interleaved per head)
  WeightMatrix k, v;     // [kv_heads * D, H]
  WeightVector q_norm;   // [D], (1 + w) scale
  WeightVector k_norm;   // [D], (1 + w) scale
  WeightMatrix o;        // [H, heads * D]
};

// Gated DeltaNet (transformers' Qwen3_5GatedDeltaNet). Kd = key heads * key dim, Vd = value heads *
// value dim, C = 2 Kd + Vd conv channels (q | k | v), nv = value heads, K = conv kernel.
struct Qwen35LinearAttentionWeights {
  WeightMatrix in_qkv;   // [C, H]
  WeightMatrix in_z;     // [Vd, H]: the output gate
  WeightMatrix in_b;     // [nv, H]: beta = sigmoid(b)
  WeightMatrix in_a;     // [nv, H]: decay input
  WeightMatrix conv;     // [C, K] (stored [C, 1, K]): depthwise causal conv, tap K-1 is the current input
  WeightVector dt_bias;  // [nv]
  WeightVector A_log;    // [nv]: g = -exp(A_log) * softplus(a + dt_bias)
  WeightVector norm;     // [value dim]: gated RMSNorm, plain weight (not 1 + w), shared by heads
  WeightMatrix out;      // [H, Vd]
};

struct Qwen35LayerWeights {
  LayerType type = LayerType::LinearAttention;
  WeightVector input_norm;               // [H], (1 + w)
  Qwen35FullAttentionWeights attention;  // bound when type == FullAttention
  Qwen35LinearAttentionWeights linear;   // bound when type == LinearAttention
  WeightVector post_norm;                // [H], (1 + w)
  WeightMatrix gate, up;                 // [I, H]
  WeightMatrix down;                     // [H, I]
};

struct Qwen35Weights {
  std::string prefix;        // "model.language_model." or "model."
  WeightMatrix embed;        // [V, H]
  std::vector<Qwen35LayerWeights> layers;
  WeightVector final_norm;   // [H], (1 + w)
  WeightMatrix lm_head;      // [V, H]; the embedding itself when tied
  // Tensors in the checkpoint that are not part of the language model, left unbound and unread.
  int vision_tensors = 0, mtp_tensors = 0;
  uint64_t vision_bytes = 0, mtp_bytes = 0;

  uint64_t bytes_per_token() const;  // weight bytes one decode step reads (embedding: one row)
};

// Binds every tensor the config's layers need, checking presence, dtype (BF16, F16 or F32), exact
// shape and alignment; the error names the tensor. `checkpoint` must outlive the result.
Qwen35Weights bind_qwen35_weights(const Checkpoint& checkpoint, const ModelConfig& config);

}  // namespace megaqwen

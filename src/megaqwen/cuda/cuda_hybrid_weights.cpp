#include "megaqwen/cuda/cuda_hybrid_weights.h"

#include "megaqwen/cuda/cuda_weights.h"
#include "megaqwen/model/gpu_layout.h"
#include "megaqwen/model/rope.h"
#include "megaqwen/util/error.h"

namespace megaqwen::cuda {

uint64_t hybrid_weight_device_bytes(const ModelConfig& c) {
  const uint64_t H = uint64_t(c.hidden_size), Q = uint64_t(c.q_dim()), KV = uint64_t(c.kv_dim()),
                 I = uint64_t(c.intermediate_size), V = uint64_t(c.vocab_size), D = uint64_t(c.head_dim),
                 C = uint64_t(c.linear_conv_dim()), Vd = uint64_t(c.linear_value_dim()),
                 nv = uint64_t(c.linear_num_value_heads), K = uint64_t(c.linear_conv_kernel),
                 dv = uint64_t(c.linear_value_head_dim);
  const uint64_t mlp = 2 * (2 * I * H + H * I) + 4 * 2 * H;
  const uint64_t full = 2 * ((2 * Q + 2 * KV) * H + H * Q) + 4 * 2 * D;
  const uint64_t linear = 2 * ((C + Vd + 2 * nv) * H + C * K + H * Vd) + 4 * (2 * nv + dv);
  return uint64_t(c.count_layers(LayerType::FullAttention)) * (mlp + full) +
         uint64_t(c.count_layers(LayerType::LinearAttention)) * (mlp + linear) +
         2 * V * H * (c.tie_word_embeddings ? 1 : 2) + 4 * H;
}

CudaHybridWeights upload_hybrid_weights(const Model& model) {
  if (!model.qwen35) fail("upload_hybrid_weights needs a Qwen3.5 model, not {}", model.config.model_type);
  const ModelConfig& c = model.config;
  const Qwen35Weights& w = *model.qwen35;
  CudaHybridWeights d;
  auto note = [&](const WeightMatrix& m) {
    if (m.dtype != DType::BF16) d.converted = true;
  };
  note(w.embed);
  d.embed = upload_matrix(w.embed);
  d.final_norm = upload_f32(zero_centered_norm_f32(w.final_norm));
  if (w.lm_head.data == w.embed.data) {
    d.lm_head = d.embed.data();
  } else {
    note(w.lm_head);
    d.lm_head_own = upload_matrix(w.lm_head);
    d.lm_head = d.lm_head_own.data();
  }
  for (const Qwen35LayerWeights& L : w.layers) {
    CudaHybridLayerWeights dl;
    dl.type = L.type;
    dl.input_norm = upload_f32(zero_centered_norm_f32(L.input_norm));
    if (L.type == LayerType::FullAttention) {
      const Qwen35FullAttentionWeights& a = L.attention;
      for (const WeightMatrix* m : {&a.q, &a.k, &a.v, &a.o}) note(*m);
      dl.qgkv = upload_bf16(gated_attention_qgkv_bf16(a, c.num_heads, c.head_dim));
      dl.q_norm = upload_f32(fold_rope_amplitude(zero_centered_norm_f32(a.q_norm), c));
      dl.k_norm = upload_f32(fold_rope_amplitude(zero_centered_norm_f32(a.k_norm), c));
      dl.o = upload_matrix(a.o);
    } else {
      const Qwen35LinearAttentionWeights& a = L.linear;
      for (const WeightMatrix* m : {&a.in_qkv, &a.in_z, &a.in_b, &a.in_a, &a.conv, &a.out}) note(*m);
      dl.in_proj = upload_bf16(delta_net_in_proj_bf16(a));
      dl.conv = upload_matrix(a.conv);
      dl.A_log = upload_vector(a.A_log);
      dl.dt_bias = upload_vector(a.dt_bias);
      dl.gated_norm = upload_vector(a.norm);
      dl.out = upload_matrix(a.out);
    }
    for (const WeightMatrix* m : {&L.gate, &L.up, &L.down}) note(*m);
    dl.post_norm = upload_f32(zero_centered_norm_f32(L.post_norm));
    dl.gate_up = upload_bf16(interleaved_rows_bf16(L.gate, L.up));
    dl.down = upload_matrix(L.down);
    d.layers.push_back(std::move(dl));
  }
  return d;
}

}  // namespace megaqwen::cuda

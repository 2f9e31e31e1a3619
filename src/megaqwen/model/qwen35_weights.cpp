#include "megaqwen/model/qwen35_weights.h"

#include "megaqwen/util/error.h"

namespace megaqwen {

namespace {

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

Qwen35FullAttentionWeights bind_full_attention(const Checkpoint& ckpt, const std::string& p, const ModelConfig& c) {
  const int64_t H = c.hidden_size, D = c.head_dim;
  Qwen35FullAttentionWeights a;
  a.q = bind_matrix(ckpt, p + "q_proj.weight", 2 * int64_t(c.q_dim()), H);
  a.k = bind_matrix(ckpt, p + "k_proj.weight", c.kv_dim(), H);
  a.v = bind_matrix(ckpt, p + "v_proj.weight", c.kv_dim(), H);
  a.q_norm = bind_vector(ckpt, p + "q_norm.weight", D);
  a.k_norm = bind_vector(ckpt, p + "k_norm.weight", D);
  a.o = bind_matrix(ckpt, p + "o_proj.weight", H, c.q_dim());
  return a;
}

Qwen35LinearAttentionWeights bind_linear_attention(const Checkpoint& ckpt, const std::string& p, const ModelConfig& c) {
  const int64_t H = c.hidden_size, C = c.linear_conv_dim(), Vd = c.linear_value_dim(), nv = c.linear_num_value_heads;
  Qwen35LinearAttentionWeights l;
  l.in_qkv = bind_matrix(ckpt, p + "in_proj_qkv.weight", C, H);
  l.in_z = bind_matrix(ckpt, p + "in_proj_z.weight", Vd, H);
  l.in_b = bind_matrix(ckpt, p + "in_proj_b.weight", nv, H);
  l.in_a = bind_matrix(ckpt, p + "in_proj_a.weight", nv, H);
  // nn.Conv1d(groups = C) stores [C, 1, K]; the middle axis is the one input channel per group.
  const TensorView& conv = bind_tensor(ckpt, p + "conv1d.weight", {C, 1, c.linear_conv_kernel});
  l.conv = {conv.data, conv.dtype(), C, c.linear_conv_kernel, &conv.name()};
  l.dt_bias = bind_vector(ckpt, p + "dt_bias", nv);
  l.A_log = bind_vector(ckpt, p + "A_log", nv);
  l.norm = bind_vector(ckpt, p + "norm.weight", c.linear_value_head_dim);
  l.out = bind_matrix(ckpt, p + "out_proj.weight", H, Vd);
  return l;
}

}  // namespace

uint64_t Qwen35Weights::bytes_per_token() const {
  uint64_t n = embed.byte_size() / uint64_t(embed.rows) + final_norm.byte_size() + lm_head.byte_size();
  for (const auto& l : layers) {
    n += l.input_norm.byte_size() + l.post_norm.byte_size() + l.gate.byte_size() + l.up.byte_size() +
         l.down.byte_size();
    if (l.type == LayerType::FullAttention) {
      const auto& a = l.attention;
      n += a.q.byte_size() + a.k.byte_size() + a.v.byte_size() + a.q_norm.byte_size() + a.k_norm.byte_size() +
           a.o.byte_size();
    } else {
      const auto& d = l.linear;
      n += d.in_qkv.byte_size() + d.in_z.byte_size() + d.in_b.byte_size() + d.in_a.byte_size() +
           d.conv.byte_size() + d.dt_bias.byte_size() + d.A_log.byte_size() + d.norm.byte_size() +
           d.out.byte_size();
    }
  }
  return n;
}

Qwen35Weights bind_qwen35_weights(const Checkpoint& ckpt, const ModelConfig& c) {
  if (!c.is_hybrid()) fail("bind_qwen35_weights: the config is not a Qwen3.5 hybrid ({})", c.model_type);
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  Qwen35Weights w;
  // The wrapper's language model lives under model.language_model.; a text-only save under model.
  w.prefix = ckpt.find("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
  const std::string& m = w.prefix;
  w.embed = bind_matrix(ckpt, m + "embed_tokens.weight", V, H);
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = m + "layers." + std::to_string(i) + ".";
    Qwen35LayerWeights l;
    l.type = c.layer_types[size_t(i)];
    l.input_norm = bind_vector(ckpt, p + "input_layernorm.weight", H);
    if (l.type == LayerType::FullAttention) {
      l.attention = bind_full_attention(ckpt, p + "self_attn.", c);
    } else {
      l.linear = bind_linear_attention(ckpt, p + "linear_attn.", c);
    }
    l.post_norm = bind_vector(ckpt, p + "post_attention_layernorm.weight", H);
    l.gate = bind_matrix(ckpt, p + "mlp.gate_proj.weight", I, H);
    l.up = bind_matrix(ckpt, p + "mlp.up_proj.weight", I, H);
    l.down = bind_matrix(ckpt, p + "mlp.down_proj.weight", H, I);
    w.layers.push_back(l);
  }
  w.final_norm = bind_vector(ckpt, m + "norm.weight", H);
  w.lm_head = c.tie_word_embeddings ? w.embed : bind_matrix(ckpt, "lm_head.weight", V, H);

  for (const auto& [name, t] : ckpt.tensors()) {
    if (starts_with(name, "model.visual.")) {
      w.vision_tensors += 1;
      w.vision_bytes += t.byte_size();
    } else if (starts_with(name, "mtp.")) {
      w.mtp_tensors += 1;
      w.mtp_bytes += t.byte_size();
    }
  }
  return w;
}

}  // namespace megaqwen

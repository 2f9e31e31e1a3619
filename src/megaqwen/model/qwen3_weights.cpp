#include "megaqwen/model/qwen3_weights.h"

#include <cstdint>

#include "megaqwen/util/error.h"

namespace megaqwen {

const TensorView& bind_tensor(const Checkpoint& ckpt, const std::string& name, std::vector<int64_t> shape) {
  const TensorView* t = ckpt.find(name);
  if (!t) fail("missing tensor '{}' (expected shape {})", name, TensorInfo{name, DType::F32, shape}.shape_string());
  if (t->dtype() != DType::BF16 && t->dtype() != DType::F16 && t->dtype() != DType::F32)
    fail("tensor '{}' has dtype {}; supported: BF16, F16, F32", name, dtype_name(t->dtype()));
  if (t->shape() != shape)
    fail("tensor '{}' has shape {}, expected {}", name, t->info->shape_string(),
         TensorInfo{name, DType::F32, shape}.shape_string());
  // The engines load elements in place (uint16_t / float pointers, GPU copies): a file whose header
  // length or offsets leave a tensor misaligned would be undefined behaviour, so refuse it.
  if (reinterpret_cast<uintptr_t>(t->data) % dtype_size(t->dtype()) != 0)
    fail("tensor '{}' is misaligned in {}: its {} data does not start at a multiple of {} bytes "
         "(unpadded header or odd data_offsets)", name, *t->file, dtype_name(t->dtype()), dtype_size(t->dtype()));
  return *t;
}

WeightMatrix bind_matrix(const Checkpoint& ckpt, const std::string& name, int64_t rows, int64_t cols) {
  const TensorView& t = bind_tensor(ckpt, name, {rows, cols});
  return {t.data, t.dtype(), rows, cols, &t.name()};
}

WeightVector bind_vector(const Checkpoint& ckpt, const std::string& name, int64_t size) {
  const TensorView& t = bind_tensor(ckpt, name, {size});
  return {t.data, t.dtype(), size};
}

uint64_t Qwen3Weights::bytes_per_token() const {
  uint64_t n = embed.byte_size() / uint64_t(embed.rows) + final_norm.byte_size() + lm_head.byte_size();
  for (const auto& l : layers)
    n += l.input_norm.byte_size() + l.q.byte_size() + l.k.byte_size() + l.v.byte_size() + l.q_norm.byte_size() +
         l.k_norm.byte_size() + l.o.byte_size() + l.post_norm.byte_size() + l.gate.byte_size() +
         l.up.byte_size() + l.down.byte_size();
  return n;
}

Qwen3Weights bind_qwen3_weights(const Checkpoint& ckpt, const ModelConfig& c) {
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  Qwen3Weights w;
  w.embed = bind_matrix(ckpt, "model.embed_tokens.weight", V, H);
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Qwen3LayerWeights l;
    l.input_norm = bind_vector(ckpt, p + "input_layernorm.weight", H);
    l.q = bind_matrix(ckpt, p + "self_attn.q_proj.weight", c.q_dim(), H);
    l.k = bind_matrix(ckpt, p + "self_attn.k_proj.weight", c.kv_dim(), H);
    l.v = bind_matrix(ckpt, p + "self_attn.v_proj.weight", c.kv_dim(), H);
    l.q_norm = bind_vector(ckpt, p + "self_attn.q_norm.weight", D);
    l.k_norm = bind_vector(ckpt, p + "self_attn.k_norm.weight", D);
    l.o = bind_matrix(ckpt, p + "self_attn.o_proj.weight", H, c.q_dim());
    l.post_norm = bind_vector(ckpt, p + "post_attention_layernorm.weight", H);
    l.gate = bind_matrix(ckpt, p + "mlp.gate_proj.weight", I, H);
    l.up = bind_matrix(ckpt, p + "mlp.up_proj.weight", I, H);
    l.down = bind_matrix(ckpt, p + "mlp.down_proj.weight", H, I);
    w.layers.push_back(l);
  }
  w.final_norm = bind_vector(ckpt, "model.norm.weight", H);
  w.lm_head = c.tie_word_embeddings ? w.embed : bind_matrix(ckpt, "lm_head.weight", V, H);
  return w;
}

}  // namespace megaqwen

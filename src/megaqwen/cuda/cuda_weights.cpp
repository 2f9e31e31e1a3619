#include "megaqwen/cuda/cuda_weights.h"

#include "megaqwen/model/gpu_layout.h"
#include "megaqwen/model/rope.h"

namespace megaqwen::cuda {

DeviceBuffer<uint16_t> upload_bf16(const std::vector<uint16_t>& host) {
  DeviceBuffer<uint16_t> d(host.size());
  CUDA_CHECK(cudaMemcpy(d.data(), host.data(), d.bytes(), cudaMemcpyHostToDevice));
  return d;
}

DeviceBuffer<uint16_t> upload_matrix(const WeightMatrix& w) {
  if (w.dtype != DType::BF16) return upload_bf16(matrix_bf16(w));
  DeviceBuffer<uint16_t> d(size_t(w.rows) * size_t(w.cols));  // stored as bf16: no host copy
  CUDA_CHECK(cudaMemcpy(d.data(), w.data, d.bytes(), cudaMemcpyHostToDevice));
  return d;
}

DeviceBuffer<float> upload_f32(const std::vector<float>& host) {
  DeviceBuffer<float> d(host.size());
  CUDA_CHECK(cudaMemcpy(d.data(), host.data(), d.bytes(), cudaMemcpyHostToDevice));
  return d;
}

DeviceBuffer<float> upload_vector(const WeightVector& w) { return upload_f32(vector_f32(w)); }

uint64_t CudaWeights::device_bytes() const {
  uint64_t n = embed.bytes() + final_norm.bytes() + lm_head_own.bytes();
  for (const auto& l : layers)
    n += l.input_norm.bytes() + l.qkv.bytes() + l.q_norm.bytes() + l.k_norm.bytes() + l.o.bytes() +
         l.post_norm.bytes() + l.gate_up.bytes() + l.down.bytes();
  return n;
}

uint64_t weight_device_bytes(const Model& model) {
  const ModelConfig& c = model.config;
  const uint64_t H = uint64_t(c.hidden_size), Q = uint64_t(c.q_dim()), KV = uint64_t(c.kv_dim()),
                 I = uint64_t(c.intermediate_size), V = uint64_t(c.vocab_size), D = uint64_t(c.head_dim);
  const uint64_t layer = 2 * ((Q + 2 * KV) * H + H * Q + 2 * I * H + H * I) + 4 * (2 * H + 2 * D);
  return uint64_t(c.num_layers) * layer + 2 * V * H * (c.tie_word_embeddings ? 1 : 2) + 4 * H;
}

CudaWeights upload_weights(const Model& model) {
  const Qwen3Weights& w = model.weights;
  CudaWeights d;
  auto note = [&](DType t) {
    if (t != DType::BF16) d.converted = true;
  };
  note(w.embed.dtype);
  d.embed = upload_matrix(w.embed);
  d.final_norm = upload_vector(w.final_norm);
  if (w.lm_head.data == w.embed.data) {
    d.lm_head = d.embed.data();
  } else {
    note(w.lm_head.dtype);
    d.lm_head_own = upload_matrix(w.lm_head);
    d.lm_head = d.lm_head_own.data();
  }
  for (const Qwen3LayerWeights& L : w.layers) {
    CudaLayerWeights dl;
    for (DType t : {L.q.dtype, L.k.dtype, L.v.dtype, L.o.dtype, L.gate.dtype, L.up.dtype, L.down.dtype}) note(t);
    dl.input_norm = upload_vector(L.input_norm);
    dl.post_norm = upload_vector(L.post_norm);
    dl.q_norm = upload_f32(fold_rope_amplitude(vector_f32(L.q_norm), model.config));
    dl.k_norm = upload_f32(fold_rope_amplitude(vector_f32(L.k_norm), model.config));
    dl.o = upload_matrix(L.o);
    dl.down = upload_matrix(L.down);

    dl.qkv = upload_bf16(stacked_qkv_bf16(L));
    dl.gate_up = upload_bf16(interleaved_gate_up_bf16(L));
    d.layers.push_back(std::move(dl));
  }
  return d;
}

}  // namespace megaqwen::cuda

#include "megaqwen/cuda/cuda_weights.h"

#include <cstring>

#include "megaqwen/util/bf16.h"

namespace megaqwen::cuda {

namespace {

uint16_t to_bf16(const uint8_t* data, DType dtype, size_t i) {
  switch (dtype) {
    case DType::BF16: {
      uint16_t v;
      std::memcpy(&v, data + 2 * i, 2);
      return v;
    }
    case DType::F16: {
      uint16_t v;
      std::memcpy(&v, data + 2 * i, 2);
      return f32_to_bf16(f16_to_f32(v));
    }
    default: {
      float v;
      std::memcpy(&v, data + 4 * i, 4);
      return f32_to_bf16(v);
    }
  }
}

// Rows [row0, row0 + rows) of a stored matrix as bf16 into host memory `out`.
void rows_to_bf16(const WeightMatrix& w, int64_t row0, int64_t rows, uint16_t* out) {
  const size_t n = size_t(rows) * size_t(w.cols);
  const uint8_t* src = w.data + uint64_t(row0) * uint64_t(w.cols) * dtype_size(w.dtype);
  if (w.dtype == DType::BF16) {
    std::memcpy(out, src, n * 2);
    return;
  }
  for (size_t i = 0; i < n; ++i) out[i] = to_bf16(src, w.dtype, i);
}

DeviceBuffer<uint16_t> upload_matrix(const WeightMatrix& w) {
  DeviceBuffer<uint16_t> d(size_t(w.rows) * size_t(w.cols));
  if (w.dtype == DType::BF16) {
    CUDA_CHECK(cudaMemcpy(d.data(), w.data, d.bytes(), cudaMemcpyHostToDevice));
  } else {
    std::vector<uint16_t> host(d.size());
    rows_to_bf16(w, 0, w.rows, host.data());
    CUDA_CHECK(cudaMemcpy(d.data(), host.data(), d.bytes(), cudaMemcpyHostToDevice));
  }
  return d;
}

DeviceBuffer<float> upload_vector(const WeightVector& w) {
  std::vector<float> host(size_t(w.size));
  for (int64_t i = 0; i < w.size; ++i) {
    switch (w.dtype) {
      case DType::BF16: {
        uint16_t v;
        std::memcpy(&v, w.data + 2 * i, 2);
        host[size_t(i)] = bf16_to_f32(v);
        break;
      }
      case DType::F16: {
        uint16_t v;
        std::memcpy(&v, w.data + 2 * i, 2);
        host[size_t(i)] = f16_to_f32(v);
        break;
      }
      default: std::memcpy(&host[size_t(i)], w.data + 4 * i, 4); break;
    }
  }
  DeviceBuffer<float> d(host.size());
  CUDA_CHECK(cudaMemcpy(d.data(), host.data(), d.bytes(), cudaMemcpyHostToDevice));
  return d;
}

}  // namespace

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
    dl.q_norm = upload_vector(L.q_norm);
    dl.k_norm = upload_vector(L.k_norm);
    dl.o = upload_matrix(L.o);
    dl.down = upload_matrix(L.down);

    const size_t H = size_t(L.q.cols);
    std::vector<uint16_t> host(size_t(L.q.rows + L.k.rows + L.v.rows) * H);
    rows_to_bf16(L.q, 0, L.q.rows, host.data());
    rows_to_bf16(L.k, 0, L.k.rows, host.data() + size_t(L.q.rows) * H);
    rows_to_bf16(L.v, 0, L.v.rows, host.data() + size_t(L.q.rows + L.k.rows) * H);
    dl.qkv.resize(host.size());
    CUDA_CHECK(cudaMemcpy(dl.qkv.data(), host.data(), dl.qkv.bytes(), cudaMemcpyHostToDevice));

    host.assign(size_t(2 * L.gate.rows) * H, 0);
    for (int64_t i = 0; i < L.gate.rows; ++i) {
      rows_to_bf16(L.gate, i, 1, host.data() + size_t(2 * i) * H);
      rows_to_bf16(L.up, i, 1, host.data() + size_t(2 * i + 1) * H);
    }
    dl.gate_up.resize(host.size());
    CUDA_CHECK(cudaMemcpy(dl.gate_up.data(), host.data(), dl.gate_up.bytes(), cudaMemcpyHostToDevice));
    d.layers.push_back(std::move(dl));
  }
  return d;
}

}  // namespace megaqwen::cuda

#include "megaqwen/model/gpu_layout.h"

#include <cstring>

#include "megaqwen/util/bf16.h"

namespace megaqwen {

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

// Rows [row0, row0 + rows) of a stored matrix as bf16 into `out`.
void rows_to_bf16(const WeightMatrix& w, int64_t row0, int64_t rows, uint16_t* out) {
  const size_t n = size_t(rows) * size_t(w.cols);
  const uint8_t* src = w.data + uint64_t(row0) * uint64_t(w.cols) * dtype_size(w.dtype);
  if (w.dtype == DType::BF16) {
    std::memcpy(out, src, n * 2);
    return;
  }
  for (size_t i = 0; i < n; ++i) out[i] = to_bf16(src, w.dtype, i);
}

}  // namespace

std::vector<uint16_t> matrix_bf16(const WeightMatrix& w) {
  std::vector<uint16_t> out(size_t(w.rows) * size_t(w.cols));
  rows_to_bf16(w, 0, w.rows, out.data());
  return out;
}

std::vector<float> vector_f32(const WeightVector& w) {
  std::vector<float> out(size_t(w.size));
  for (int64_t i = 0; i < w.size; ++i) {
    switch (w.dtype) {
      case DType::BF16: {
        uint16_t v;
        std::memcpy(&v, w.data + 2 * i, 2);
        out[size_t(i)] = bf16_to_f32(v);
        break;
      }
      case DType::F16: {
        uint16_t v;
        std::memcpy(&v, w.data + 2 * i, 2);
        out[size_t(i)] = f16_to_f32(v);
        break;
      }
      default: std::memcpy(&out[size_t(i)], w.data + 4 * i, 4); break;
    }
  }
  return out;
}

std::vector<uint16_t> stacked_qkv_bf16(const Qwen3LayerWeights& l) {
  const size_t H = size_t(l.q.cols);
  std::vector<uint16_t> out(size_t(l.q.rows + l.k.rows + l.v.rows) * H);
  rows_to_bf16(l.q, 0, l.q.rows, out.data());
  rows_to_bf16(l.k, 0, l.k.rows, out.data() + size_t(l.q.rows) * H);
  rows_to_bf16(l.v, 0, l.v.rows, out.data() + size_t(l.q.rows + l.k.rows) * H);
  return out;
}

std::vector<uint16_t> interleaved_gate_up_bf16(const Qwen3LayerWeights& l) {
  const size_t H = size_t(l.gate.cols);
  std::vector<uint16_t> out(size_t(2 * l.gate.rows) * H);
  for (int64_t i = 0; i < l.gate.rows; ++i) {
    rows_to_bf16(l.gate, i, 1, out.data() + size_t(2 * i) * H);
    rows_to_bf16(l.up, i, 1, out.data() + size_t(2 * i + 1) * H);
  }
  return out;
}

}  // namespace megaqwen

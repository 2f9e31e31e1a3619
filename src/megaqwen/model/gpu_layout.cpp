#include "megaqwen/model/gpu_layout.h"

#include <cstring>

#include "megaqwen/util/bf16.h"
#include "megaqwen/util/error.h"

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

std::vector<float> zero_centered_norm_f32(const WeightVector& w) {
  std::vector<float> out = vector_f32(w);
  for (float& v : out) v = 1.0f + v;
  return out;
}

std::vector<uint16_t> stacked_rows_bf16(const std::vector<RowRange>& pieces) {
  if (pieces.empty()) return {};
  const int64_t cols = pieces.front().matrix->cols;
  int64_t rows = 0;
  for (const RowRange& p : pieces) {
    if (p.matrix->cols != cols || p.row0 < 0 || p.rows < 0 || p.row0 + p.rows > p.matrix->rows)
      fail("stacked_rows_bf16: a piece of {} x {} rows [{}, {}) does not fit a stack of {} columns", p.matrix->rows,
           p.matrix->cols, p.row0, p.row0 + p.rows, cols);
    rows += p.rows;
  }
  std::vector<uint16_t> out(size_t(rows) * size_t(cols));
  size_t at = 0;
  for (const RowRange& p : pieces) {
    rows_to_bf16(*p.matrix, p.row0, p.rows, out.data() + at);
    at += size_t(p.rows) * size_t(cols);
  }
  return out;
}

std::vector<uint16_t> stacked_qkv_bf16(const Qwen3LayerWeights& l) {
  return stacked_rows_bf16({{&l.q, 0, l.q.rows}, {&l.k, 0, l.k.rows}, {&l.v, 0, l.v.rows}});
}

std::vector<uint16_t> interleaved_rows_bf16(const WeightMatrix& even, const WeightMatrix& odd) {
  if (even.rows != odd.rows || even.cols != odd.cols)
    fail("interleaved_rows_bf16: {} x {} and {} x {} differ", even.rows, even.cols, odd.rows, odd.cols);
  const size_t H = size_t(even.cols);
  std::vector<uint16_t> out(size_t(2 * even.rows) * H);
  for (int64_t i = 0; i < even.rows; ++i) {
    rows_to_bf16(even, i, 1, out.data() + size_t(2 * i) * H);
    rows_to_bf16(odd, i, 1, out.data() + size_t(2 * i + 1) * H);
  }
  return out;
}

std::vector<uint16_t> interleaved_gate_up_bf16(const Qwen3LayerWeights& l) { return interleaved_rows_bf16(l.gate, l.up); }

std::vector<uint16_t> transposed_bf16(const std::vector<uint16_t>& m, size_t rows, size_t cols) {
  if (m.size() != rows * cols) fail("transposed_bf16: {} values for a {} x {} matrix", m.size(), rows, cols);
  std::vector<uint16_t> t(m.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
  return t;
}

std::vector<uint16_t> gated_attention_qgkv_bf16(const Qwen35FullAttentionWeights& w, int heads, int head_dim) {
  std::vector<RowRange> pieces;
  for (int h = 0; h < heads; ++h) pieces.push_back({&w.q, int64_t(h) * 2 * head_dim, head_dim});             // queries
  for (int h = 0; h < heads; ++h) pieces.push_back({&w.q, int64_t(h) * 2 * head_dim + head_dim, head_dim});  // gates
  pieces.push_back({&w.k, 0, w.k.rows});
  pieces.push_back({&w.v, 0, w.v.rows});
  return stacked_rows_bf16(pieces);
}

std::vector<uint16_t> delta_net_in_proj_bf16(const Qwen35LinearAttentionWeights& w) {
  return stacked_rows_bf16(
      {{&w.in_qkv, 0, w.in_qkv.rows}, {&w.in_z, 0, w.in_z.rows}, {&w.in_b, 0, w.in_b.rows}, {&w.in_a, 0, w.in_a.rows}});
}

}  // namespace megaqwen

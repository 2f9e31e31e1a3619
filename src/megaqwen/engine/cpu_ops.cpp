#include "megaqwen/engine/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "megaqwen/engine/cpu_simd.h"
#include "megaqwen/util/bf16.h"

// Accumulating in 16 independent lanes lets the compiler vectorize the MQ_VECTOR_CLONES loops
// without -ffast-math; the result does not depend on the thread count.

namespace megaqwen::cpu {

namespace {

constexpr int kLanes = 16;

// always_inline: the body must be compiled inside each target clone to get its instructions.
template <typename Load>
[[gnu::always_inline]] inline float dot_lanes(Load load, const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += load(i + j) * x[i + j];
  float sum = 0;
  for (int j = 0; j < kLanes; ++j) sum += acc[j];
  for (; i < n; ++i) sum += load(i) * x[i];
  return sum;
}

MQ_VECTOR_CLONES float dot_bf16(const uint16_t* w, const float* x, int64_t n) {
  return dot_lanes([w](int64_t i) { return bf16_to_f32(w[i]); }, x, n);
}
MQ_VECTOR_CLONES float dot_f16(const uint16_t* w, const float* x, int64_t n) {
  return dot_lanes([w](int64_t i) { return f16_to_f32(w[i]); }, x, n);
}
MQ_VECTOR_CLONES float dot_f32(const float* w, const float* x, int64_t n) {
  return dot_lanes([w](int64_t i) { return w[i]; }, x, n);
}

}  // namespace

float dot_row(const WeightMatrix& w, int64_t row, const float* x) {
  const uint8_t* p = w.data + uint64_t(row) * uint64_t(w.cols) * dtype_size(w.dtype);
  switch (w.dtype) {
    case DType::BF16: return dot_bf16(reinterpret_cast<const uint16_t*>(p), x, w.cols);
    case DType::F16: return dot_f16(reinterpret_cast<const uint16_t*>(p), x, w.cols);
    default: return dot_f32(reinterpret_cast<const float*>(p), x, w.cols);
  }
}

float weight_at(const WeightVector& w, int64_t i) {
  switch (w.dtype) {
    case DType::BF16: return bf16_to_f32(reinterpret_cast<const uint16_t*>(w.data)[i]);
    case DType::F16: return f16_to_f32(reinterpret_cast<const uint16_t*>(w.data)[i]);
    default: return reinterpret_cast<const float*>(w.data)[i];
  }
}

void matrix_row(const WeightMatrix& w, int64_t row, float* out) {
  WeightVector v{w.data + uint64_t(row) * uint64_t(w.cols) * dtype_size(w.dtype), w.dtype, w.cols};
  for (int64_t i = 0; i < w.cols; ++i) out[i] = weight_at(v, i);
}

void rms_norm(const float* x, const WeightVector& w, double eps, int64_t n, float* out) {
  double sum_sq = 0;  // fp64 for the sum keeps the reference independent of summation order
  for (int64_t i = 0; i < n; ++i) sum_sq += double(x[i]) * double(x[i]);
  const float scale = float(1.0 / std::sqrt(sum_sq / double(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = weight_at(w, i) * (x[i] * scale);
}

void round_to_bf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

void matmul_bf16_input(const WeightMatrix& w, const float* in, int64_t tokens, float* out, ThreadPool& pool) {
  std::vector<float> rounded(in, in + tokens * w.cols);
  round_to_bf16(rounded.data(), int64_t(rounded.size()));
  matmul(w, rounded.data(), tokens, out, pool);
}

void rms_norm_zero_centered(const float* x, const WeightVector& w, double eps, int64_t n, float* out) {
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) sum_sq += double(x[i]) * double(x[i]);
  const float scale = float(1.0 / std::sqrt(sum_sq / double(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = (1.0f + weight_at(w, i)) * (x[i] * scale);
}

void gated_rms_norm(const float* x, const float* gate, const WeightVector& w, double eps, int64_t n, float* out) {
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) sum_sq += double(x[i]) * double(x[i]);
  const float scale = float(1.0 / std::sqrt(sum_sq / double(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = weight_at(w, i) * (x[i] * scale) * silu(gate[i]);
}

void l2_normalize(float* x, int64_t n, double eps) {
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) sum_sq += double(x[i]) * double(x[i]);
  const float scale = float(1.0 / std::sqrt(sum_sq + eps));
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

std::vector<float> rope_inv_freq(int64_t head_dim, double theta) {
  // fp32 throughout, as transformers computes it: theta^(2i/D) in fp32, then its reciprocal.
  std::vector<float> inv(size_t(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i)
    inv[size_t(i)] = 1.0f / std::pow(float(theta), float(2 * i) / float(head_dim));
  return inv;
}

void rope(float* head, int64_t head_dim, int64_t position, const float* inv_freq, float amplitude) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    // fp32 angle (position * inv_freq), as transformers forms it; long positions depend on this.
    const float angle = float(position) * inv_freq[i];
    const float c = std::cos(angle) * amplitude, s = std::sin(angle) * amplitude;
    const float a = head[i], b = head[i + half];
    head[i] = a * c - b * s;
    head[i + half] = b * c + a * s;
  }
}

MQ_VECTOR_CLONES float dot(const float* a, const float* b, int64_t n) { return dot_f32(a, b, n); }

MQ_VECTOR_CLONES void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace megaqwen::cpu

#include "megaqwen/engine/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "megaqwen/util/bf16.h"

// The hot loops get an AVX2+FMA clone picked at load time, so one binary runs on any x86-64 and is
// fast on the machines we have. Accumulating in 16 independent lanes lets the compiler vectorize
// without -ffast-math; the result does not depend on the thread count.
#if defined(__x86_64__) && !defined(__clang__)
#define MQ_VECTOR_CLONES __attribute__((target_clones("arch=haswell", "default")))
#else
#define MQ_VECTOR_CLONES
#endif

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

// A 4x4 block of the batched product: out[t][r] = dot(in[t], rows[r]) for 4 tokens and 4 fp32 weight
// rows. 16 independent vector accumulators keep the FMA units busy and load each operand once per
// block instead of once per dot product.
using v8 = float __attribute__((vector_size(32), aligned(4)));

MQ_VECTOR_CLONES void dot_block_4x4(const float* rows, int64_t row_stride, const float* in, int64_t in_stride,
                                    int64_t n, float out[4][4]) {
  v8 acc[4][4] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8 w[4], x[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) w[r] = *reinterpret_cast<const v8*>(rows + r * row_stride + i);
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) x[t] = *reinterpret_cast<const v8*>(in + t * in_stride + i);
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t)
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) acc[t][r] += w[r] * x[t];
  }
  for (int t = 0; t < 4; ++t)
    for (int r = 0; r < 4; ++r) {
      float s = 0;
      for (int j = 0; j < 8; ++j) s += acc[t][r][j];
      for (int64_t k = i; k < n; ++k) s += rows[r * row_stride + k] * in[t * in_stride + k];
      out[t][r] = s;
    }
}

float dot_row(const WeightMatrix& w, int64_t row, const float* x) {
  const uint8_t* p = w.data + uint64_t(row) * uint64_t(w.cols) * dtype_size(w.dtype);
  switch (w.dtype) {
    case DType::BF16: return dot_bf16(reinterpret_cast<const uint16_t*>(p), x, w.cols);
    case DType::F16: return dot_f16(reinterpret_cast<const uint16_t*>(p), x, w.cols);
    default: return dot_f32(reinterpret_cast<const float*>(p), x, w.cols);
  }
}

}  // namespace

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

void matmul(const WeightMatrix& w, const float* in, int64_t tokens, float* out, ThreadPool& pool) {
  const int64_t rows = w.rows, cols = w.cols;
  if (tokens == 1) {
    pool.parallel_for(size_t(rows), [&](size_t r0, size_t r1) {
      for (size_t r = r0; r < r1; ++r) out[r] = dot_row(w, int64_t(r), in);
    }, 64);
    return;
  }
  // Batched: convert a tile of weight rows to fp32 once, then use it for every token, 4 rows x 4
  // tokens at a time.
  constexpr int64_t kTileRows = 16;
  pool.parallel_for(size_t((rows + kTileRows - 1) / kTileRows), [&](size_t b0, size_t b1) {
    std::vector<float> tile(size_t(kTileRows * cols));
    for (size_t b = b0; b < b1; ++b) {
      const int64_t r0 = int64_t(b) * kTileRows, nr = std::min(kTileRows, rows - r0);
      for (int64_t r = 0; r < nr; ++r) matrix_row(w, r0 + r, tile.data() + r * cols);
      int64_t t = 0;
      for (; t + 4 <= tokens; t += 4) {
        int64_t r = 0;
        for (; r + 4 <= nr; r += 4) {
          float block[4][4];
          dot_block_4x4(tile.data() + r * cols, cols, in + t * cols, cols, cols, block);
          for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) out[(t + i) * rows + r0 + r + j] = block[i][j];
        }
        for (; r < nr; ++r)
          for (int64_t i = 0; i < 4; ++i)
            out[(t + i) * rows + r0 + r] = dot_f32(tile.data() + r * cols, in + (t + i) * cols, cols);
      }
      for (; t < tokens; ++t)
        for (int64_t r = 0; r < nr; ++r)
          out[t * rows + r0 + r] = dot_f32(tile.data() + r * cols, in + t * cols, cols);
    }
  });
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

void causal_attention(const float* q, int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim,
                      int64_t first_position, const float* k_cache, const float* v_cache, float scale, float* out,
                      ThreadPool& pool) {
  const int64_t D = head_dim, group = heads / kv_heads, row = kv_heads * D;
  pool.parallel_for(size_t(tokens * heads), [&](size_t i0, size_t i1) {
    std::vector<float> scores(size_t(first_position + tokens));
    for (size_t i = i0; i < i1; ++i) {
      const int64_t t = int64_t(i) / heads, h = int64_t(i) % heads, g = h / group, n = first_position + t + 1;
      const float* qh = q + (t * heads + h) * D;
      float max_score = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        scores[size_t(j)] = dot(qh, k_cache + j * row + g * D, D) * scale;
        max_score = std::max(max_score, scores[size_t(j)]);
      }
      float sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += (scores[size_t(j)] = std::exp(scores[size_t(j)] - max_score));
      float* o = out + (t * heads + h) * D;
      std::fill(o, o + D, 0.0f);
      for (int64_t j = 0; j < n; ++j) axpy(scores[size_t(j)] / sum, v_cache + j * row + g * D, o, D);
    }
  });
}

MQ_VECTOR_CLONES float dot(const float* a, const float* b, int64_t n) { return dot_f32(a, b, n); }

MQ_VECTOR_CLONES void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace megaqwen::cpu

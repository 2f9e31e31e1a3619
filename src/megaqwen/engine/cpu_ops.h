// The operations of the CPU reference engine, one function each, in fp32 arithmetic over weights
// stored as BF16, F16 or F32. Written to read like the math; matmul (cpu_matmul.cpp) and the dot
// products are the places that care about speed.
#pragma once

#include <cstdint>
#include <vector>

#include "megaqwen/model/qwen3_weights.h"
#include "megaqwen/util/thread_pool.h"

namespace megaqwen::cpu {

// Element i of a stored vector, as fp32.
float weight_at(const WeightVector& w, int64_t i);
// Row `row` of a stored matrix, converted to fp32 into out[cols].
void matrix_row(const WeightMatrix& w, int64_t row, float* out);

// out[n] = w * (x * rsqrt(mean(x^2) + eps)); x and out may alias.
void rms_norm(const float* x, const WeightVector& w, double eps, int64_t n, float* out);

// Qwen3.5's norm: out[n] = (1 + w) * (x * rsqrt(mean(x^2) + eps)), w stored zero-centred; x and out
// may alias.
void rms_norm_zero_centered(const float* x, const WeightVector& w, double eps, int64_t n, float* out);
// Qwen3.5's gated norm of a DeltaNet head: out[n] = w * (x * rsqrt(mean(x^2) + eps)) * silu(gate), with
// the plain weight w; x and out may alias.
void gated_rms_norm(const float* x, const float* gate, const WeightVector& w, double eps, int64_t n, float* out);
// x[n] *= rsqrt(sum(x^2) + eps), in place (the DeltaNet's q and k normalization).
void l2_normalize(float* x, int64_t n, double eps);

// out[t, :] = in[t, :] W^T for t < tokens: W is [rows, cols], in is [tokens, cols], out [tokens, rows].
// In cpu_matmul.cpp: packed register-blocked kernels for tokens > 1, a bf16 GEMV for one token.
void matmul(const WeightMatrix& w, const float* in, int64_t tokens, float* out, ThreadPool& pool);
// matmul of a copy of `in` rounded to bf16 (round to nearest even), as a GEMM fed bf16 activations.
void matmul_bf16_input(const WeightMatrix& w, const float* in, int64_t tokens, float* out, ThreadPool& pool);
// The dot product of row `row` of W with x[cols] (vectorized per weight dtype).
float dot_row(const WeightMatrix& w, int64_t row, const float* x);

// RoPE frequencies theta^(-2i/D) for i < D/2.
std::vector<float> rope_inv_freq(int64_t head_dim, double theta);
// Rotate-half RoPE on one head: pairs (i, i + D/2), angle = position * inv_freq[i]; cos and sin
// times `amplitude` (YaRN's attention factor, RopeScaling::amplitude), as transformers applies it.
void rope(float* head, int64_t head_dim, int64_t position, const float* inv_freq, float amplitude = 1.0f);

// Causal grouped-query attention of `tokens` new queries at positions first_position.. over a cache
// laid out [position, kv_heads, head_dim] that already holds their keys and values:
// out[t, h] = softmax_j(q[t, h] . K[j, h / group] * scale) V[j, h / group] for j <= first_position + t.
// q and out are [tokens, heads, head_dim]; group = heads / kv_heads.
void causal_attention(const float* q, int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim,
                      int64_t first_position, const float* k_cache, const float* v_cache, float scale, float* out,
                      ThreadPool& pool);

float dot(const float* a, const float* b, int64_t n);
void axpy(float a, const float* x, float* y, int64_t n);  // y += a * x

inline float silu(float x) { return x / (1.0f + __builtin_expf(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }

// x[i] = bf16(x[i]) (round to nearest even), in place: what a bf16 cache keeps of an fp32 value.
void round_to_bf16(float* x, int64_t n);
// log(1 + e^x), and x itself above 20 as torch.nn.functional.softplus does (no overflow, same values).
inline float softplus(float x) { return x > 20.0f ? x : __builtin_log1pf(__builtin_expf(x)); }

}  // namespace megaqwen::cpu

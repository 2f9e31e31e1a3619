// The CUDA kernels as host-callable launchers: the one interface between the host code (engine,
// tests) and the device code in kernels/*.cuh, which kernels.cu compiles. Plain C++: bf16 data is
// passed as uint16_t bit patterns so no CUDA header beyond the runtime API is needed here.
//
// Shapes in comments: [rows, cols] row-major. H hidden, Q = heads*D, KV = kv_heads*D, I intermediate,
// V vocabulary, T tokens of a prefill chunk. Every launcher enqueues on `stream` and checks the launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace megaqwen::cuda {

// Head sizes the attention and QK-norm kernels are compiled for (Qwen3: 128 everywhere; Qwen3.5: 256).
constexpr bool supported_head_dim(int d) { return d == 64 || d == 128 || d == 256; }
// Query heads per KV head the decode attention is compiled for at head size d (its per-block partial
// outputs, 32 G d bytes, live in static shared memory: at most 8 heads at 128, 4 at 256).
constexpr bool supported_group(int d, int g) { return (g == 1 || g == 2 || g == 4 || g == 8) && g * d <= 1024; }

// ---- embedding, conversions ----
// x[t, :] = fp32(table[tokens[t], :]); table [V, H] bf16, x [T, H] fp32.
void embed_rows(const uint16_t* table, int hidden, const int32_t* tokens, int T, float* x, cudaStream_t stream);
// hi = bf16(x), lo = bf16(x - hi) (lo may be null): the two-term bf16 split of fp32 activations.
void split_bf16(const float* x, size_t n, uint16_t* hi, uint16_t* lo, cudaStream_t stream);
// Deterministic noise in [-1, 1) as bf16 into dst[0, n), keyed by seed (benchmarks' deep caches).
void fill_noise_bf16(uint16_t* dst, size_t n, uint32_t seed, cudaStream_t stream);
// The same as fp32 in [-scale, scale) (the hybrid engine's recurrent states for deep benchmarks).
void fill_noise_f32(float* dst, size_t n, float scale, uint32_t seed, cudaStream_t stream);

// ---- RMSNorm (kernels/rmsnorm.cuh) ----
// out[r, :] = w * (x[r, :] * rsqrt(mean(x[r, :]^2) + eps)) for r < rows; x, out [rows, n] fp32.
void rms_norm_f32(const float* x, const float* w, int rows, int n, float eps, float* out, cudaStream_t stream);
// The same, written as the bf16 split (hi, lo [rows, n]; lo may be null) for the GEMMs.
void rms_norm_split(const float* x, const float* w, int rows, int n, float eps, uint16_t* hi, uint16_t* lo,
                    cudaStream_t stream);

// ---- QK-norm + RoPE + KV append (kernels/rope_qknorm.cuh) ----
// qkv [T, Q + 2KV] fp32 (q | k | v per token), or [T, 2Q + 2KV] (q | gate | k | v: `gated`). Token t
// sits at position (pos_ptr ? *pos_ptr : pos_base) + t. q_out [T, heads, D] fp32 =
// RoPE(RMSNorm_head(q; q_norm)); the cache rows of those positions get bf16(RoPE(RMSNorm_head(k;
// k_norm))) and bf16(v). RoPE turns the first rotary_dim dims (even, <= D) and passes the rest.
// Caches are one layer's [context, kv_heads, D].
struct QkNormRopeArgs {
  const float* qkv;
  int T, heads, kv_heads, head_dim;
  int rotary_dim;         // D for Qwen3; Qwen3.5 rotates a quarter of the head
  bool gated;             // rows are q | gate | k | v
  const float* q_norm;    // [D]
  const float* k_norm;    // [D]
  const float* inv_freq;  // [rotary_dim / 2]
  const int32_t* pos_ptr; // device position of token 0 (decode), or null: pos_base (prefill)
  int pos_base;
  float eps;
  float* q_out;
  uint16_t* k_cache;
  uint16_t* v_cache;
};
void qk_norm_rope(const QkNormRopeArgs& a, cudaStream_t stream);

// x[r, i] *= sigmoid(gate[r * gate_stride + i]) for r < rows, i < n: Qwen3.5's attention output gate
// (gate_stride 2Q + 2KV, the gate rows read where the projection left them).
void sigmoid_gate(float* x, const float* gate, int rows, int n, int gate_stride, cudaStream_t stream);

// ---- attention (kernels/attention_prefill.cuh, kernels/attention_decode.cuh) ----
// Causal attention of T new queries at positions p0..p0+T-1 over cache positions 0..p0+T-1.
// q [T, heads, D] fp32, out [T, heads, D] fp32; query head h reads kv head h / (heads / kv_heads).
struct PrefillAttentionArgs {
  const float* q;
  const uint16_t* k_cache;
  const uint16_t* v_cache;
  int T, p0, heads, kv_heads, head_dim;
  float scale;  // 1/sqrt(D)
  float* out;
};
// fp32 on the CUDA cores (kernels/attention_prefill.cuh): as exact as the CPU reference's order allows.
void attention_prefill(const PrefillAttentionArgs& a, cudaStream_t stream);
// bf16 tensor cores, fp32 accumulation (kernels/attention_prefill_tc.cuh): q and the softmax weights
// rounded to bf16 (~1e-3 relative), ~10x fewer cycles on long prompts. sm_80 or newer.
void attention_prefill_tc(const PrefillAttentionArgs& a, cudaStream_t stream);
// Bytes of dynamic shared memory each asks for (checked against the device limit).
size_t attention_prefill_smem_bytes(int head_dim);
size_t attention_prefill_tc_smem_bytes(int head_dim);

// One query per head at position n-1 where n = *pos_ptr + 1, over cache positions 0..n-1, split into
// `splits` chunks (flash-decoding): partial_o [heads, splits, D], partial_ml [heads, splits, 2] are
// scratch; out [heads, D] fp32. The grid is fixed by `splits`, so a captured graph serves every n.
struct DecodeAttentionArgs {
  const float* q;
  const uint16_t* k_cache;
  const uint16_t* v_cache;
  const int32_t* pos_ptr;
  int heads, kv_heads, head_dim, splits;
  float scale;
  float* partial_o;
  float* partial_ml;
  float* out;
};
void attention_decode(const DecodeAttentionArgs& a, cudaStream_t stream);

// ---- GEMV for decode (kernels/gemv_bf16.cuh) ----
// y = W x with W [rows, K] bf16, x [K] fp32, fp32 accumulation. K must be a multiple of 8.
enum class GemvOut {
  Store,   // y[r] = (W x)[r]
  Add,     // y[r] += (W x)[r]            (residual add fused)
  SwiGLU,  // y[r] = silu((W x)[2r]) * (W x)[2r+1], rows even (gate/up rows interleaved)
};
void gemv_bf16(const uint16_t* W, const float* x, int rows, int K, float* y, GemvOut mode, cudaStream_t stream);
// y = W RMSNorm(x) (norm weight norm_w [K] fp32): the norm fused into the GEMV, as the separate
// rms_norm_f32 then gemv_bf16 up to the order of the rounding (~1e-7 relative).
void gemv_bf16_normed(const uint16_t* W, const float* x, const float* norm_w, float eps, int rows, int K, float* y,
                      GemvOut mode, cudaStream_t stream);

// ---- SwiGLU for prefill (kernels/swiglu.cuh) ----
// gu [T, 2I] fp32 with gate/up interleaved per row pair; act = silu(gate) * up as the bf16 split
// hi, lo [T, I] (lo may be null).
void swiglu_split(const float* gu, int T, int I, uint16_t* hi, uint16_t* lo, cudaStream_t stream);

// ---- Gated DeltaNet, Qwen3.5's linear attention (kernels/gated_delta_net.cuh) ----
// The steps of cpu_gated_delta_net.h for T tokens. qkv [T, C] fp32 with C = q [nk, dk] | k [nk, dk] |
// v [nv, dv]; conv [C, K] bf16 with 2 <= K <= 8; conv_state [K-1, C] fp32, oldest first.
// causal_conv: in place, qkv = SiLU(depthwise causal conv), conv_state advanced by T inputs.
constexpr int kConvMaxTaps = 8;  // K of the causal conv (Qwen3.5: 4)
void causal_conv(float* qkv, const uint16_t* conv, float* conv_state, int T, int C, int K, cudaStream_t stream);
// q and k l2-normalized (l2_eps), q scaled by 1/sqrt(dk), beta = sigmoid(b), alpha = exp(-exp(A_log)
// softplus(a + dt_bias)), then per token S = alpha S, S += k beta (v - S^T k)^T, o = S^T q. qkv is
// read only; states [nv, dk, dv] fp32 advance by T tokens; o [T, nv, dv]. dk <= 128, nv a multiple
// of nk.
struct DeltaRuleArgs {
  const float* qkv;
  const float* b;        // [T, nv]
  const float* a;        // [T, nv]
  const float* A_log;    // [nv] fp32
  const float* dt_bias;  // [nv] fp32
  float* states;
  float* o;
  int T, nk, nv, dk, dv;
  float l2_eps;
};
void delta_rule(const DeltaRuleArgs& a, cudaStream_t stream);
// The same rule for a long prompt in chunks of 32 tokens (kernels/gated_delta_net_chunked.cuh): one
// sequential step per chunk instead of per token, equal to delta_rule up to fp32 rounding (the sums
// run in another order). `workspace` holds delta_rule_chunked_workspace_floats(T, ...) floats.
size_t delta_rule_chunked_workspace_floats(int T, int nk, int nv, int dk, int dv);
void delta_rule_chunked(const DeltaRuleArgs& a, float* workspace, cudaStream_t stream);
// out[r, :] = w * (x[r, :] * rsqrt(mean(x[r, :]^2) + eps)) * silu(z[r, :]) for r < rows; x, z, out
// [rows, n] fp32 (out may be x), w [n] fp32.
void gated_rms_norm(const float* x, const float* z, const float* w, int rows, int n, float eps, float* out,
                    cudaStream_t stream);

// ---- sampling (kernels/sampling.cuh) ----
// How the raw logits become the values a draw compares: penalties over `counts` (occurrences of each
// id in the history; null: none), then division by the temperature; Gumbel noise for sampling.
struct LogitTransform {
  const int32_t* counts = nullptr;  // [V] or null
  float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  float temperature = 1.0f;         // logits are divided by it, as the CPU Sampler does; 1 for greedy
  bool gumbel = false;              // add Gumbel(0,1) noise keyed by (seed, step, id)
  uint64_t seed = 0, step = 0;
};
// Blocks the first argmax pass uses for V values (at most kArgmaxMaxBlocks).
constexpr int kArgmaxMaxBlocks = 1024;
int argmax_blocks(int V);
// out[0] = the id of the largest transformed value, the lowest id on ties; NaN never wins unless every
// value is NaN. partial is scratch of 2 * blocks words. `blocks` in 1..kArgmaxMaxBlocks (any count).
void argmax(const float* logits, int V, const LogitTransform& t, int blocks, uint64_t* partial, int32_t* out,
            cudaStream_t stream);
// Filtered sampling, the CPU Sampler's cuts, one draw keyed by (seed, step); scratch [V] fp32, out[0]
// = the id. top_k in 1..kSampleCandidates (< V): softmax over the top-k set, then top-p and min-p.
// top_k off (0 or >= V): top-p / min-p over the whole vocabulary (kernels/nucleus.cuh: exact, no
// sort; V < kNucleusMaxVocab). A top_k in (kSampleCandidates, V) throws: the caller samples on the
// host.
constexpr int kSampleCandidates = 1024;
constexpr int kNucleusMaxVocab = 1 << 18;  // the nucleus sampler's fixed point: V * 2^45 < 2^63
struct FilterParams {
  int top_k = 0;
  float top_p = 1.0f, min_p = 0.0f;
};
void sample_filtered(const float* logits, int V, const LogitTransform& t, const FilterParams& f, float* scratch,
                     int32_t* out, cudaStream_t stream);
// counts[ids[i]] += 1 for i < n (penalty bookkeeping).
void count_tokens(const int32_t* ids, int n, int32_t* counts, cudaStream_t stream);
// The uniform in [0, 1) keyed by (seed, step, index) the device draws use (exposed for tests).
double counter_uniform(uint64_t seed, uint64_t step, uint32_t index);

}  // namespace megaqwen::cuda

// The launchers declared in kernels.h: grid shapes, template dispatch on head size and group, and a
// launch check after each kernel. All device code lives in kernels/*.cuh (one concept per file).
#include "megaqwen/cuda/kernels.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "megaqwen/cuda/cuda_check.h"
#include "megaqwen/cuda/kernels/attention_decode.cuh"
#include "megaqwen/cuda/kernels/attention_prefill.cuh"
#include "megaqwen/cuda/kernels/attention_prefill_tc.cuh"
#include "megaqwen/cuda/kernels/common.cuh"
#include "megaqwen/cuda/kernels/elementwise.cuh"
#include "megaqwen/cuda/kernels/gated_delta_net.cuh"
#include "megaqwen/cuda/kernels/gated_delta_net_chunked.cuh"
#include "megaqwen/cuda/kernels/gemv_bf16.cuh"
#include "megaqwen/cuda/kernels/rmsnorm.cuh"
#include "megaqwen/cuda/kernels/rope_qknorm.cuh"
#include "megaqwen/cuda/kernels/sampling.cuh"
#include "megaqwen/cuda/kernels/swiglu.cuh"
#include "megaqwen/cuda/launch.cuh"

namespace megaqwen::cuda {

namespace {

const bf16* as_bf16(const uint16_t* p) { return reinterpret_cast<const bf16*>(p); }
bf16* as_bf16(uint16_t* p) { return reinterpret_cast<bf16*>(p); }

// Grid for a grid-stride elementwise kernel.
int elementwise_blocks(size_t n, int threads) {
  return int(std::min<size_t>((n + size_t(threads) - 1) / size_t(threads), 65535 * 8));
}

[[noreturn]] void unsupported(const char* what, int value) {
  // Reached only if the engine's load-time shape checks were bypassed.
  throw_error(std::string("CUDA kernels: unsupported ") + what + " " + std::to_string(value));
}

}  // namespace

void embed_rows(const uint16_t* table, int hidden, const int32_t* tokens, int T, float* x, cudaStream_t stream) {
  if (T == 0) return;
  launch_kernel(embed_rows_kernel, T, 128, 0, stream, as_bf16(table), hidden, tokens, x);
  CUDA_CHECK_LAUNCH("embed_rows_kernel");
}

void split_bf16(const float* x, size_t n, uint16_t* hi, uint16_t* lo, cudaStream_t stream) {
  if (n == 0) return;
  launch_kernel(split_bf16_kernel, elementwise_blocks(n, 256), 256, 0, stream, x, n, as_bf16(hi), as_bf16(lo));
  CUDA_CHECK_LAUNCH("split_bf16_kernel");
}

void fill_noise_bf16(uint16_t* dst, size_t n, uint32_t seed, cudaStream_t stream) {
  if (n == 0) return;
  launch_kernel(fill_noise_kernel, elementwise_blocks(n, 256), 256, 0, stream, as_bf16(dst), n, seed);
  CUDA_CHECK_LAUNCH("fill_noise_kernel");
}

void fill_noise_f32(float* dst, size_t n, float scale, uint32_t seed, cudaStream_t stream) {
  if (n == 0) return;
  launch_kernel(fill_noise_f32_kernel, elementwise_blocks(n, 256), 256, 0, stream, dst, n, scale, seed);
  CUDA_CHECK_LAUNCH("fill_noise_f32_kernel");
}

void causal_conv(float* qkv, const uint16_t* conv, float* conv_state, int T, int C, int K, cudaStream_t stream) {
  if (K < 2 || K > kConvMaxTaps) unsupported("causal conv kernel size", K);
  if (T == 0 || C == 0) return;
  launch_kernel(causal_conv_kernel<kConvMaxTaps>, div_up(C, 128), 128, 0, stream, qkv, as_bf16(conv), conv_state,
                T, C, K);
  CUDA_CHECK_LAUNCH("causal_conv_kernel");
}

void delta_rule(const DeltaRuleArgs& a, cudaStream_t stream) {
  if (a.nk <= 0 || a.nv % a.nk != 0) unsupported("DeltaNet value heads per key head, nv", a.nv);
  if (a.dv <= 0) unsupported("DeltaNet value head size", a.dv);
  if (a.T == 0) return;
  const DeltaRuleParams p{a.qkv, a.b, a.a, a.A_log, a.dt_bias, a.states, a.o, a.T, a.nk, a.nv, a.dk, a.dv, a.l2_eps};
  const dim3 grid(unsigned(a.nv), unsigned(div_up(a.dv, 32)));
  // The column of S lives in registers: compile the loop for the smallest bound that holds dk.
  if (a.dk >= 1 && a.dk <= 32) launch_kernel(delta_rule_kernel<32>, grid, 32, 0, stream, p);
  else if (a.dk <= 64) launch_kernel(delta_rule_kernel<64>, grid, 32, 0, stream, p);
  else if (a.dk <= 128) launch_kernel(delta_rule_kernel<128>, grid, 32, 0, stream, p);
  else unsupported("DeltaNet key head size", a.dk);
  CUDA_CHECK_LAUNCH("delta_rule_kernel");
}

size_t delta_rule_chunked_workspace_floats(int T, int nk, int nv, int dk, int dv) {
  const size_t chunks = size_t(div_up(T, kDeltaChunk)), C = size_t(kDeltaChunk);
  return 2 * size_t(T) * size_t(nk) * size_t(dk) /* qn, kn */ +
         chunks * size_t(nv) * C * (size_t(dk) + size_t(dv) + C + 1) /* W, U, P, G */;
}

void delta_rule_chunked(const DeltaRuleArgs& a, float* workspace, cudaStream_t stream) {
  if (a.nk <= 0 || a.nv % a.nk != 0) unsupported("DeltaNet value heads per key head, nv", a.nv);
  if (a.dv <= 0) unsupported("DeltaNet value head size", a.dv);
  if (a.dk < 1 || a.dk > 128) unsupported("DeltaNet key head size", a.dk);
  if (a.T == 0) return;
  const size_t chunks = size_t(div_up(a.T, kDeltaChunk)), C = size_t(kDeltaChunk);
  const size_t qk = size_t(a.T) * size_t(a.nk) * size_t(a.dk), records = chunks * size_t(a.nv) * C;
  DeltaChunkParams p{a.qkv, a.b, a.a, a.A_log, a.dt_bias, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                     a.states, a.o, a.T, a.nk, a.nv, a.dk, a.dv, a.l2_eps};
  p.qn = workspace;
  p.kn = p.qn + qk;
  p.W = p.kn + qk;
  p.U = p.W + records * size_t(a.dk);
  p.P = p.U + records * size_t(a.dv);
  p.G = p.P + records * C;
  const dim3 norm_grid(unsigned(a.T), unsigned(a.nk)), prepare_grid(unsigned(chunks), unsigned(a.nv));
  const dim3 scan_grid(unsigned(a.nv), unsigned(div_up(a.dv, kDeltaScanCols)));
  launch_kernel(delta_qk_norm_kernel, norm_grid, 32, 0, stream, p);
  CUDA_CHECK_LAUNCH("delta_qk_norm_kernel");
  // Shared rows sized for the smallest bound that holds dk (41 KB of static shared memory at 128).
  auto run = [&](auto prepare, auto scan) {
    launch_kernel(prepare, prepare_grid, kDeltaChunkThreads, 0, stream, p);
    CUDA_CHECK_LAUNCH("delta_chunk_prepare_kernel");
    launch_kernel(scan, scan_grid, kDeltaChunkThreads, 0, stream, p);
    CUDA_CHECK_LAUNCH("delta_chunk_scan_kernel");
  };
  if (a.dk <= 32) run(delta_chunk_prepare_kernel<32>, delta_chunk_scan_kernel<32>);
  else if (a.dk <= 64) run(delta_chunk_prepare_kernel<64>, delta_chunk_scan_kernel<64>);
  else run(delta_chunk_prepare_kernel<128>, delta_chunk_scan_kernel<128>);
}

void gated_rms_norm(const float* x, const float* z, const float* w, int rows, int n, float eps, float* out,
                    cudaStream_t stream) {
  if (rows == 0) return;
  launch_kernel(gated_rms_norm_kernel, rows, kGatedNormThreads, 0, stream, x, z, w, n, eps, out);
  CUDA_CHECK_LAUNCH("gated_rms_norm_kernel");
}

void rms_norm_f32(const float* x, const float* w, int rows, int n, float eps, float* out, cudaStream_t stream) {
  if (n > kNormThreads * kNormMaxPerThread) unsupported("RMSNorm width", n);
  if (rows == 0) return;
  launch_kernel(rms_norm_kernel<NormOut::F32>, rows, kNormThreads, 0, stream, x, w, n, eps, out, nullptr, nullptr);
  CUDA_CHECK_LAUNCH("rms_norm_kernel<F32>");
}

void rms_norm_split(const float* x, const float* w, int rows, int n, float eps, uint16_t* hi, uint16_t* lo,
                    cudaStream_t stream) {
  if (n > kNormThreads * kNormMaxPerThread) unsupported("RMSNorm width", n);
  if (rows == 0) return;
  launch_kernel(rms_norm_kernel<NormOut::Split>, rows, kNormThreads, 0, stream, x, w, n, eps, nullptr, as_bf16(hi),
                as_bf16(lo));
  CUDA_CHECK_LAUNCH("rms_norm_kernel<Split>");
}

namespace {
template <int D>
void launch_qk_norm_rope(const QkNormRopeArgs& a, cudaStream_t stream) {
  const dim3 grid(unsigned(a.T), unsigned(a.heads + a.kv_heads));
  launch_kernel(qk_norm_rope_kernel<D>, grid, 32, 0, stream, a.qkv, a.heads, a.kv_heads, a.gated, a.rotary_dim,
                a.q_norm, a.k_norm, a.inv_freq, a.pos_ptr, a.pos_base, a.eps, a.q_out, as_bf16(a.k_cache),
                as_bf16(a.v_cache));
  CUDA_CHECK_LAUNCH("qk_norm_rope_kernel");
}
}  // namespace

void qk_norm_rope(const QkNormRopeArgs& a, cudaStream_t stream) {
  if (a.rotary_dim < 2 || a.rotary_dim > a.head_dim || a.rotary_dim % 2 != 0) unsupported("rotary_dim", a.rotary_dim);
  if (a.T == 0) return;
  switch (a.head_dim) {
    case 64: launch_qk_norm_rope<64>(a, stream); break;
    case 128: launch_qk_norm_rope<128>(a, stream); break;
    case 256: launch_qk_norm_rope<256>(a, stream); break;
    default: unsupported("head_dim", a.head_dim);
  }
}

void sigmoid_gate(float* x, const float* gate, int rows, int n, int gate_stride, cudaStream_t stream) {
  const size_t total = size_t(rows) * size_t(n);
  if (total == 0) return;
  launch_kernel(sigmoid_gate_kernel, elementwise_blocks(total, 256), 256, 0, stream, x, gate, rows, n, gate_stride);
  CUDA_CHECK_LAUNCH("sigmoid_gate_kernel");
}

size_t attention_prefill_smem_bytes(int head_dim) {
  switch (head_dim) {
    case 64: return PrefillSmem<64>::kBytes;
    case 128: return PrefillSmem<128>::kBytes;
    default: return PrefillSmem<256>::kBytes;
  }
}

size_t attention_prefill_tc_smem_bytes(int head_dim) {
  switch (head_dim) {
    case 64: return TcPrefillSmem<64>::kBytes;
    case 128: return TcPrefillSmem<128>::kBytes;
    default: return TcPrefillSmem<256>::kBytes;
  }
}

namespace {
// A kernel's dynamic shared memory above 48 KB must be allowed once per device (prefill is never
// captured in a graph, where the call would not be allowed). `configured` bit d: done on device d
// (devices 64.. every time).
template <class Kernel>
void allow_dynamic_smem(Kernel kernel, size_t bytes, std::atomic<uint64_t>& configured) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t(1) << device : 0;
  if (bit && (configured.load(std::memory_order_acquire) & bit)) return;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  configured.fetch_or(bit, std::memory_order_release);
}

// Both prefill attention kernels share their arguments and grid (query tiles x heads); they differ
// in tile height, block size and shared memory.
template <bool kTensorCores, int D>
void launch_prefill_attention(const PrefillAttentionArgs& a, cudaStream_t stream) {
  static std::atomic<uint64_t> configured{0};  // one per kernel instantiation
  const auto kernel = kTensorCores ? attention_prefill_tc_kernel<D> : attention_prefill_kernel<D>;
  const size_t smem = kTensorCores ? TcPrefillSmem<D>::kBytes : PrefillSmem<D>::kBytes;
  const int rows = kTensorCores ? kTcBQ : kPrefillBQ, threads = kTensorCores ? kTcThreads : kPrefillThreads;
  allow_dynamic_smem(kernel, smem, configured);
  const dim3 grid(unsigned(div_up(a.T, rows)), unsigned(a.heads));
  const float scale_log2 = a.scale * 1.4426950408889634f;
  launch_kernel(kernel, grid, threads, smem, stream, a.q, as_bf16(a.k_cache), as_bf16(a.v_cache), a.T, a.p0, a.heads,
                a.kv_heads, scale_log2, a.out);
  CUDA_CHECK_LAUNCH(kTensorCores ? "attention_prefill_tc_kernel" : "attention_prefill_kernel");
}

template <bool kTensorCores>
void dispatch_prefill_attention(const PrefillAttentionArgs& a, cudaStream_t stream) {
  if (a.T == 0) return;
  switch (a.head_dim) {
    case 64: launch_prefill_attention<kTensorCores, 64>(a, stream); break;
    case 128: launch_prefill_attention<kTensorCores, 128>(a, stream); break;
    case 256: launch_prefill_attention<kTensorCores, 256>(a, stream); break;
    default: unsupported("head_dim", a.head_dim);
  }
}
}  // namespace

void attention_prefill(const PrefillAttentionArgs& a, cudaStream_t stream) { dispatch_prefill_attention<false>(a, stream); }
void attention_prefill_tc(const PrefillAttentionArgs& a, cudaStream_t stream) { dispatch_prefill_attention<true>(a, stream); }

namespace {
template <int D, int G>
void launch_decode_attention(const DecodeAttentionArgs& a, cudaStream_t stream) {
  const float scale_log2 = a.scale * 1.4426950408889634f;
  launch_kernel(attention_decode_kernel<D, G>, dim3(unsigned(a.kv_heads), unsigned(a.splits)), kDecodeAttnThreads, 0,
                stream, a.q, as_bf16(a.k_cache), as_bf16(a.v_cache), a.pos_ptr, a.kv_heads, a.splits, scale_log2,
                a.partial_o, a.partial_ml);
  CUDA_CHECK_LAUNCH("attention_decode_kernel");
  launch_kernel(attention_decode_merge_kernel<D>, a.heads, D, 0, stream, a.partial_o, a.partial_ml, a.splits, a.out);
  CUDA_CHECK_LAUNCH("attention_decode_merge_kernel");
}
template <int D>
void dispatch_group(const DecodeAttentionArgs& a, cudaStream_t stream) {
  const int g = a.heads / a.kv_heads;
  if (!supported_group(D, g)) unsupported("GQA group", g);
  switch (g) {
    case 1: launch_decode_attention<D, 1>(a, stream); break;
    case 2: launch_decode_attention<D, 2>(a, stream); break;
    case 4: launch_decode_attention<D, 4>(a, stream); break;
    default:
      if constexpr (supported_group(D, 8)) launch_decode_attention<D, 8>(a, stream);
      break;
  }
}
}  // namespace

void attention_decode(const DecodeAttentionArgs& a, cudaStream_t stream) {
  switch (a.head_dim) {
    case 64: dispatch_group<64>(a, stream); break;
    case 128: dispatch_group<128>(a, stream); break;
    case 256: dispatch_group<256>(a, stream); break;
    default: unsupported("head_dim", a.head_dim);
  }
}

namespace {
template <bool kNormed>
void launch_gemv(const uint16_t* W, const float* x, const float* norm_w, float eps, int rows, int K, float* y,
                 GemvOut mode, cudaStream_t stream) {
  if (K % 8 != 0) unsupported("GEMV K (must be a multiple of 8)", K);
  if (rows == 0) return;
  constexpr int rows_per_block = (kGemvThreads / 32) * kGemvRowsPerWarp;
  const int blocks = div_up(rows, rows_per_block);
  auto launch = [&](auto kernel) {
    launch_kernel(kernel, blocks, kGemvThreads, 0, stream, as_bf16(W), x, rows, K, y, norm_w, eps);
  };
  switch (mode) {
    case GemvOut::Store: launch(gemv_bf16_kernel<GemvEpilogue::Store, kNormed>); break;
    case GemvOut::Add: launch(gemv_bf16_kernel<GemvEpilogue::Add, kNormed>); break;
    case GemvOut::SwiGLU:
      if (rows % 2 != 0) unsupported("SwiGLU GEMV rows (must be even)", rows);
      launch(gemv_bf16_kernel<GemvEpilogue::SwiGLU, kNormed>);
      break;
  }
  CUDA_CHECK_LAUNCH(kNormed ? "gemv_bf16_kernel<normed>" : "gemv_bf16_kernel");
}
}  // namespace

void gemv_bf16(const uint16_t* W, const float* x, int rows, int K, float* y, GemvOut mode, cudaStream_t stream) {
  launch_gemv<false>(W, x, nullptr, 0.0f, rows, K, y, mode, stream);
}

void gemv_bf16_normed(const uint16_t* W, const float* x, const float* norm_w, float eps, int rows, int K, float* y,
                      GemvOut mode, cudaStream_t stream) {
  launch_gemv<true>(W, x, norm_w, eps, rows, K, y, mode, stream);
}

void swiglu_split(const float* gu, int T, int I, uint16_t* hi, uint16_t* lo, cudaStream_t stream) {
  const size_t n = size_t(T) * size_t(I);
  if (n == 0) return;
  launch_kernel(swiglu_split_kernel, elementwise_blocks(n, 256), 256, 0, stream, reinterpret_cast<const float2*>(gu), n,
                as_bf16(hi), as_bf16(lo));
  CUDA_CHECK_LAUNCH("swiglu_split_kernel");
}

int argmax_blocks(int V) { return std::clamp(div_up(V, 4 * kArgmaxThreads), 1, 264); }

void argmax(const float* logits, int V, const LogitTransform& t, int blocks, uint64_t* partial, int32_t* out,
            cudaStream_t stream) {
  if (blocks < 1 || blocks > kArgmaxMaxBlocks) unsupported("argmax block count", blocks);
  launch_kernel(argmax_partial_kernel, blocks, kArgmaxThreads, 0, stream, logits, V, t, partial);
  CUDA_CHECK_LAUNCH("argmax_partial_kernel");
  launch_kernel(argmax_final_kernel, 1, kArgmaxThreads, 0, stream, partial, blocks, out);
  CUDA_CHECK_LAUNCH("argmax_final_kernel");
}

void sample_filtered(const float* logits, int V, const LogitTransform& t, const FilterParams& f, float* scratch,
                     int32_t* out, cudaStream_t stream) {
  LogitTransform no_noise = t;
  no_noise.gumbel = false;
  launch_kernel(transform_logits_kernel, elementwise_blocks(size_t(V), 256), 256, 0, stream, logits, V, no_noise,
                scratch);
  CUDA_CHECK_LAUNCH("transform_logits_kernel");
  if (f.top_k <= 0 || f.top_k >= V) {  // top-k off: top-p / min-p over the whole vocabulary
    if (V >= kNucleusMaxVocab)
      throw_error("sample_filtered: a vocabulary of " + std::to_string(V) + " ids is beyond the nucleus sampler's " +
                  std::to_string(kNucleusMaxVocab));
    launch_kernel(sample_nucleus_kernel, 1, kNucleusThreads, 0, stream, scratch, V, f.top_p, f.min_p, t.seed, t.step,
                  out);
    CUDA_CHECK_LAUNCH("sample_nucleus_kernel");
    return;
  }
  if (f.top_k > kSampleCandidates)
    throw_error("sample_filtered: top_k " + std::to_string(f.top_k) + " is above the device sampler's " +
                std::to_string(kSampleCandidates) + " candidates");
  launch_kernel(sample_filtered_kernel, 1, kSampleThreads, 0, stream, scratch, V, f.top_k, f.top_p, f.min_p, t.seed,
                t.step, out);
  CUDA_CHECK_LAUNCH("sample_filtered_kernel");
}

void count_tokens(const int32_t* ids, int n, int32_t* counts, cudaStream_t stream) {
  if (n == 0) return;
  launch_kernel(count_tokens_kernel, div_up(n, 256), 256, 0, stream, ids, n, counts);
  CUDA_CHECK_LAUNCH("count_tokens_kernel");
}

double counter_uniform(uint64_t seed, uint64_t step, uint32_t index) { return uniform_at(seed, step, index); }

}  // namespace megaqwen::cuda

// Causal attention over a prompt chunk on the tensor cores (bf16 inputs, fp32 accumulation): the same
// contract as attention_prefill.cuh (q [T, heads, D] fp32 for positions p0..p0+T-1, one layer's bf16
// k/v cache holding positions 0..p0+T-1; out [T, heads, D] fp32), flash-attention style.
//
// Why: the fp32 kernel does 4 D flops per (query, key) pair on the CUDA cores; at a 4,096-token
// prompt that is ~10x the time of all the prefill GEMMs together. Here Q K^T and P V are bf16
// tensor-core products (WMMA 16x16x16, fp32 accumulators): the k and v operands are the cache's bf16
// values as they are, q is rounded to bf16 once (after the log2(e)/sqrt(D) scale), and the softmax
// weights P are rounded to bf16 for the second product (the row sums l use the same rounded values,
// so the normalization matches what was multiplied). Relative error ~1e-3 against fp64 attention
// over the same cache, set by those two roundings.
//
// Block = 64 queries of one head, 4 warps, warp w owning query rows 16w..16w+15. Per key tile of 64
// positions: the block stages K and V (bf16, 16-byte copies), each warp computes its 16 x 64 scores S
// (4 accumulator tiles over D/16 steps), writes them to shared memory, and two lanes per row run the
// online softmax over them (causal mask, running max m, sum l, the correction exp2(m_old - m_new))
// and write P as bf16; then O (D/16 accumulator tiles in registers) is rescaled row by row and
// O += P V. Fragment layouts are the compiler's: the per-row rescale finds each accumulator
// element's row through a fragment loaded from a matrix of row numbers (same fragment type, same
// layout), so no layout is assumed anywhere (and the emulator's stand-in, whose layout differs, runs
// the same code).
#pragma once

#include <mma.h>

#include "megaqwen/cuda/kernels/common.cuh"

namespace megaqwen::cuda {

constexpr int kTcBQ = 64, kTcBK = 64, kTcWarps = 4, kTcThreads = 32 * kTcWarps;

// Shared memory (bytes), row strides padded (bf16 by 8, fp32 by 4: WMMA wants multiples of 16 bytes;
// the pad also staggers banks). After the loop the K and V tiles' space stages the fp32 output.
template <int D>
struct TcPrefillSmem {
  static constexpr int kLd = D + 8;           // bf16 row stride of Q, K, V
  static constexpr int kSLd = kTcBK + 4;      // fp32 row stride of S
  static constexpr int kPLd = kTcBK + 8;      // bf16 row stride of P
  static constexpr int kOLd = D + 4;          // fp32 row stride of the output staging
  static constexpr size_t kQ = 0;                                          // bf16 [BQ][kLd]
  static constexpr size_t kK = kQ + size_t(kTcBQ) * kLd * 2;               // bf16 [BK][kLd]
  static constexpr size_t kV = kK + size_t(kTcBK) * kLd * 2;               // bf16 [BK][kLd]
  static constexpr size_t kS = kV + size_t(kTcBK) * kLd * 2;               // fp32 [BQ][kSLd]
  static constexpr size_t kP = kS + size_t(kTcBQ) * kSLd * 4;              // bf16 [BQ][kPLd]
  static constexpr size_t kRow = kP + size_t(kTcBQ) * kPLd * 2;            // fp32 [BQ]: per-row factor
  static constexpr size_t kRowIds = kRow + size_t(kTcBQ) * 4;              // fp32 [16][16]: r at (r, c)
  static constexpr size_t kBytes = kRowIds + 16 * 16 * 4;
  static_assert(size_t(kTcBQ) * kOLd * 4 <= kS - kK, "the output staging must fit in the K and V tiles");
};

template <int D>
__global__ __launch_bounds__(kTcThreads) void attention_prefill_tc_kernel(
    const float* __restrict__ q, const bf16* __restrict__ k_cache, const bf16* __restrict__ v_cache, int T, int p0,
    int heads, int kv_heads, float scale_log2, float* __restrict__ out) {
  pdl_begin();
#if defined(MEGAQWEN_SIMT) || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  namespace wmma = nvcuda::wmma;
  using L = TcPrefillSmem<D>;
  using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
  using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;  // K^T: K rows as columns
  using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
  using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  constexpr int DT = D / 16;  // 16-wide column tiles of a head
  constexpr int D8 = D / 8;   // 16-byte groups per row

#ifdef MEGAQWEN_SIMT
  MEGAQWEN_EXTERN_SHARED(unsigned char, smem);
#else
  extern __shared__ __align__(128) unsigned char tc_smem[];  // WMMA pointers must be 32-byte aligned
  unsigned char* smem = tc_smem;
#endif
  bf16* Qs = reinterpret_cast<bf16*>(smem + L::kQ);
  bf16* Ks = reinterpret_cast<bf16*>(smem + L::kK);
  bf16* Vs = reinterpret_cast<bf16*>(smem + L::kV);
  float* Ss = reinterpret_cast<float*>(smem + L::kS);
  bf16* Ps = reinterpret_cast<bf16*>(smem + L::kP);
  float* row_factor = reinterpret_cast<float*>(smem + L::kRow);
  float* row_ids = reinterpret_cast<float*>(smem + L::kRowIds);

  const int h = blockIdx.y, kvh = h / (heads / kv_heads);
  const int t0 = blockIdx.x * kTcBQ;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int r0 = warp * 16;  // the warp's first row in the block

  for (int i = tid; i < kTcBQ * D; i += kTcThreads) {
    const int r = i / D, d = i % D, t = t0 + r;
    Qs[r * L::kLd + d] = __float2bfloat16_rn(t < T ? q[(size_t(t) * heads + h) * D + d] * scale_log2 : 0.0f);
  }
  for (int i = tid; i < 256; i += kTcThreads) row_ids[i] = float(i / 16);
  __syncthreads();
  FragC rows;  // element i of any FragC belongs to row rows.x[i] of its tile
  wmma::load_matrix_sync(rows, row_ids, 16, wmma::mem_row_major);

  FragC o[DT];
#pragma unroll
  for (int c = 0; c < DT; ++c) wmma::fill_fragment(o[c], 0.0f);
  // Lanes 2r and 2r + 1 own row r of the warp's 16 (columns 32 (lane & 1) .. + 31 of each S tile).
  const int my_row = r0 + (lane >> 1), half = lane & 1;
  const int my_pos = p0 + t0 + my_row;  // its query's position (rows past T are computed, never stored)
  float m = -INFINITY, l = 0.0f;

  const int t_last = min(t0 + kTcBQ, T) - 1;
  const int kv_end = p0 + t_last + 1;  // keys 0..kv_end-1 are visible to some query of this block
  for (int j0 = 0; j0 < kv_end; j0 += kTcBK) {
    __syncthreads();  // the previous tile's readers are done
    for (int i = tid; i < kTcBK * D8; i += kTcThreads) {
      const int j = i / D8, dc = i % D8, p = j0 + j;
      uint4 kw = make_uint4(0, 0, 0, 0), vw = kw;
      if (p < kv_end) {
        const size_t at = (size_t(p) * kv_heads + kvh) * D + dc * 8;
        kw = __ldg(reinterpret_cast<const uint4*>(k_cache + at));
        vw = __ldg(reinterpret_cast<const uint4*>(v_cache + at));
      }
      *reinterpret_cast<uint4*>(Ks + j * L::kLd + dc * 8) = kw;
      *reinterpret_cast<uint4*>(Vs + j * L::kLd + dc * 8) = vw;
    }
    __syncthreads();

    // S = Q K^T for the warp's 16 rows and the tile's 64 keys.
    {
      FragC s[kTcBK / 16];
#pragma unroll
      for (int n = 0; n < kTcBK / 16; ++n) wmma::fill_fragment(s[n], 0.0f);
#pragma unroll
      for (int kk = 0; kk < DT; ++kk) {
        FragA a;
        wmma::load_matrix_sync(a, Qs + r0 * L::kLd + kk * 16, L::kLd);
#pragma unroll
        for (int n = 0; n < kTcBK / 16; ++n) {
          FragBt b;
          wmma::load_matrix_sync(b, Ks + (n * 16) * L::kLd + kk * 16, L::kLd);
          wmma::mma_sync(s[n], a, b, s[n]);
        }
      }
#pragma unroll
      for (int n = 0; n < kTcBK / 16; ++n)
        wmma::store_matrix_sync(Ss + r0 * L::kSLd + n * 16, s[n], L::kSLd, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax of the lane's half row; P = exp2(S - m) as bf16, l over the rounded values.
    {
      float v[32];
      float mx = -INFINITY;
      const float* srow = Ss + my_row * L::kSLd + half * 32;
#pragma unroll
      for (int c = 0; c < 32; ++c) {
        const int key = j0 + half * 32 + c;
        v[c] = key <= my_pos ? srow[c] : -INFINITY;
        mx = fmaxf(mx, v[c]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
      const float mn = fmaxf(m, mx);
      const bool empty = mn == -INFINITY;  // nothing visible yet (padding rows only)
      const float corr = empty ? 1.0f : exp2f(m - mn);
      float sum = 0.0f;
      bf16* prow = Ps + my_row * L::kPLd + half * 32;
#pragma unroll
      for (int c = 0; c < 32; ++c) {
        const bf16 p = __float2bfloat16_rn(empty ? 0.0f : exp2f(v[c] - mn));
        prow[c] = p;
        sum += __bfloat162float(p);
      }
      sum += __shfl_xor_sync(kFullMask, sum, 1);
      l = l * corr + sum;
      m = mn;
      if (half == 0) row_factor[my_row] = corr;
    }
    __syncwarp();

    // O = corr O + P V.
#pragma unroll
    for (int c = 0; c < DT; ++c)
#pragma unroll
      for (int i = 0; i < FragC::num_elements; ++i) o[c].x[i] *= row_factor[r0 + int(rows.x[i])];
#pragma unroll
    for (int kk = 0; kk < kTcBK / 16; ++kk) {
      FragA a;
      wmma::load_matrix_sync(a, Ps + r0 * L::kPLd + kk * 16, L::kPLd);
#pragma unroll
      for (int c = 0; c < DT; ++c) {
        FragB b;
        wmma::load_matrix_sync(b, Vs + (kk * 16) * L::kLd + c * 16, L::kLd);
        wmma::mma_sync(o[c], a, b, o[c]);
      }
    }
  }

  // out = O / l, staged through shared memory (the K and V tiles' space) so rows past T are not written.
  __syncthreads();  // every warp is done with the last K and V tiles
  if (half == 0) row_factor[my_row] = 1.0f / l;
  __syncwarp();
  float* Os = reinterpret_cast<float*>(smem + L::kK);
#pragma unroll
  for (int c = 0; c < DT; ++c) {
#pragma unroll
    for (int i = 0; i < FragC::num_elements; ++i) o[c].x[i] *= row_factor[r0 + int(rows.x[i])];
    wmma::store_matrix_sync(Os + r0 * L::kOLd + c * 16, o[c], L::kOLd, wmma::mem_row_major);
  }
  __syncwarp();
  for (int i = lane; i < 16 * D; i += 32) {
    const int r = r0 + i / D, d = i % D, t = t0 + r;
    if (t < T) out[(size_t(t) * heads + h) * D + d] = Os[r * L::kOLd + d];
  }
#else
  __trap();  // bf16 tensor cores need sm_80; the launcher never picks this kernel below that
#endif
}

}  // namespace megaqwen::cuda

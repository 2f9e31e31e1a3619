// cpu::matmul, the CPU engine's main hot loop: out[t, r] = sum_k in[t, k] W[r, k] in fp32.
//
// Two shapes of work, two kernels:
// - Prefill (tokens > 1) is bound by the FMAs. W is packed a panel of 32 rows at a time, converted to
//   fp32 and laid out [k][32], so one k step is a contiguous 128-byte line of weights. The micro-kernel
//   keeps an (M tokens x 32 rows) block of accumulators in registers and, per k, broadcasts each
//   token's input value against the line: 2M FMAs per 2 + M loads. M = 12 with AVX-512 (24 zmm
//   accumulators of the 32 registers), 6 with AVX2 (12 of 16 ymm, over each 16-row half). Each
//   accumulator starts from zero for every block of kKBlock values of k and is then added to the
//   output: partial sums of 256 terms, better rounded than one running sum over k, and the same
//   FMA sequence at either width, so AVX2 and AVX-512 give bit-identical results.
// - Decode (one token) is bound by reading the weights: a bf16 row is 2 bytes per FMA. Loaded as
//   32-bit words, a pair of bf16 values becomes two fp32 values with one shift (the even element) and
//   one mask (the odd one), so x is split into its even and odd elements once per call and each
//   word costs two FMAs and two integer operations. One row at a time: interleaving four rows (to
//   share the loads of x) was as fast from cache but halved the rate from DRAM, where the
//   prefetchers follow one stream per thread far better than four.
//
// Neither splits k across threads, so the result does not depend on the thread count.
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/engine/cpu_panel_product.h"
#include "megaqwen/engine/cpu_simd.h"
#include "megaqwen/engine/cpu_transpose16.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace megaqwen::cpu {

namespace {

constexpr int64_t kPanelRows = kPanelWidth;  // rows of W per packed panel
constexpr int64_t kKBlock = 256;  // k values per accumulator pass (32 KiB of packed panel)
// k values per packing pass: one 64-byte line of each of the 32 rows, whose 4 KiB of fp32 output
// stay in L1. Walking all 32 rows at every k instead touches lines K * 2 bytes apart, which (K = 1024:
// 2 KiB) fall into two L1 sets and evict each other: that loop ran at one value per ~15 cycles.
constexpr int64_t kPackKBlock = 32;

#if defined(__x86_64__)
#define MQ_X86 1
#define MQ_TARGET_AVX512 __attribute__((target("avx512f")))
#define MQ_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define MQ_X86 0
#endif

// ---- level selection -------------------------------------------------------------------------

SimdLevel probe_simd_level() {
#if MQ_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return SimdLevel::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdLevel::kAvx2;
#endif
  return SimdLevel::kGeneric;
}

std::atomic<SimdLevel>& active_level() {
  static std::atomic<SimdLevel> level{detected_simd_level()};
  return level;
}

// ---- prefill: packing ------------------------------------------------------------------------

#if MQ_X86
// 16 x 16 blocks widened and transposed in registers (cpu_transpose16.h): loads of 16 bf16 from each
// of 16 rows, then three rounds of shuffles leave column k of the block in one register, stored as 16
// consecutive floats of packed row k. Returns how many k it did (K rounded down to 16); the caller
// packs the rest.
#pragma GCC diagnostic push
// GCC 12 warns that the intrinsics' internal _mm512_undefined_* operands are uninitialized (they are
// unused by design).
#if !defined(__clang__)  // clang has no such warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
MQ_TARGET_AVX512 int64_t pack_bf16_avx512(const uint16_t* base, int64_t K, float* packed) {
  const int64_t done = K / 16 * 16;
  for (int64_t k32 = 0; k32 < done; k32 += kPackKBlock)
    for (int64_t half = 0; half < 2; ++half)  // rows 0-15, then 16-31, each reading its lines whole
      for (int64_t k0 = k32; k0 < std::min(k32 + kPackKBlock, done); k0 += 16) {
        __m512 r[16];
        for (int j = 0; j < 16; ++j) {
          const auto* src = reinterpret_cast<const __m256i*>(base + (half * 16 + j) * K + k0);
          r[j] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(src)), 16));
        }
        transpose16_store(r, packed + k0 * kPanelRows + half * 16, kPanelRows);
      }
  return done;
}
#pragma GCC diagnostic pop
#endif

// packed[k * 32 + j] = W[r0 + j, k] as fp32, zero for rows past the matrix's end. bf16 (what Qwen
// ships) is widened in place, kPackKBlock values of k at a time (with AVX-512, 16 x 16 blocks in
// registers); other dtypes go through a row converted by matrix_row.
void pack_panel(const WeightMatrix& w, int64_t r0, float* packed) {
  const int64_t K = w.cols, valid = std::min(kPanelRows, w.rows - r0);
  if (w.dtype == DType::BF16 && valid == kPanelRows) {
    const auto* base = reinterpret_cast<const uint16_t*>(w.data) + r0 * K;
    int64_t start = 0;
#if MQ_X86
    if (simd_level() == SimdLevel::kAvx512) start = pack_bf16_avx512(base, K, packed);
#endif
    for (int64_t k0 = start; k0 < K; k0 += kPackKBlock) {
      const int64_t k1 = std::min(K, k0 + kPackKBlock);
      for (int64_t j = 0; j < kPanelRows; ++j) {
        const uint16_t* row = base + j * K;
        for (int64_t k = k0; k < k1; ++k) packed[k * kPanelRows + j] = std::bit_cast<float>(uint32_t(row[k]) << 16);
      }
    }
    return;
  }
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t j = 0; j < kPanelRows; ++j) {
    if (j < valid) {
      matrix_row(w, r0 + j, row.data());
      for (int64_t k = 0; k < K; ++k) packed[k * kPanelRows + j] = row[size_t(k)];
    } else {
      for (int64_t k = 0; k < K; ++k) packed[k * kPanelRows + j] = 0.0f;
    }
  }
}

// ---- prefill: micro-kernels ------------------------------------------------------------------
// Each computes c[m][0..32) (+)= sum over kb values of k of in[m * in_stride + k] * packed[k][0..32)
// for m < M, where `first` says whether c holds a previous block's sum to add to.

template <int M>
void tile_generic(const float* packed, const float* in, int64_t in_stride, int64_t kb, float* c, bool first) {
  float acc[M][kPanelRows] = {};
  for (int64_t k = 0; k < kb; ++k) {
    const float* w = packed + k * kPanelRows;
    for (int m = 0; m < M; ++m) {
      const float x = in[m * in_stride + k];
      for (int j = 0; j < kPanelRows; ++j) acc[m][j] += x * w[j];
    }
  }
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < kPanelRows; ++j) c[m * kPanelRows + j] = first ? acc[m][j] : c[m * kPanelRows + j] + acc[m][j];
}

#if MQ_X86
template <int M>
MQ_TARGET_AVX512 void tile_avx512(const float* packed, const float* in, int64_t in_stride, int64_t kb, float* c,
                                  bool first) {
  __m512 acc[M][2];
#pragma GCC unroll 16
  for (int m = 0; m < M; ++m) acc[m][0] = acc[m][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kb; ++k) {
    const __m512 w0 = _mm512_loadu_ps(packed + k * kPanelRows), w1 = _mm512_loadu_ps(packed + k * kPanelRows + 16);
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      const __m512 x = _mm512_set1_ps(in[m * in_stride + k]);
      acc[m][0] = _mm512_fmadd_ps(x, w0, acc[m][0]);
      acc[m][1] = _mm512_fmadd_ps(x, w1, acc[m][1]);
    }
  }
#pragma GCC unroll 16
  for (int m = 0; m < M; ++m)
    for (int h = 0; h < 2; ++h) {
      float* out = c + m * kPanelRows + h * 16;
      _mm512_storeu_ps(out, first ? acc[m][h] : _mm512_add_ps(_mm512_loadu_ps(out), acc[m][h]));
    }
}

template <int M>
MQ_TARGET_AVX2 void tile_avx2(const float* packed, const float* in, int64_t in_stride, int64_t kb, float* c,
                              bool first) {
  for (int half = 0; half < 2; ++half) {
    const float* p = packed + half * 16;
    __m256 acc[M][2];
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kb; ++k) {
      const __m256 w0 = _mm256_loadu_ps(p + k * kPanelRows), w1 = _mm256_loadu_ps(p + k * kPanelRows + 8);
#pragma GCC unroll 16
      for (int m = 0; m < M; ++m) {
        const __m256 x = _mm256_set1_ps(in[m * in_stride + k]);
        acc[m][0] = _mm256_fmadd_ps(x, w0, acc[m][0]);
        acc[m][1] = _mm256_fmadd_ps(x, w1, acc[m][1]);
      }
    }
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m)
      for (int h = 0; h < 2; ++h) {
        float* out = c + m * kPanelRows + half * 16 + h * 8;
        _mm256_storeu_ps(out, first ? acc[m][h] : _mm256_add_ps(_mm256_loadu_ps(out), acc[m][h]));
      }
  }
}
#endif

using TileFn = void (*)(const float*, const float*, int64_t, int64_t, float*, bool);

// tile_table<Kernel>(0..MR-1)[m] is Kernel<m>::run for m in 1..MR: the tokens left over after the
// full tiles get a tile of exactly their count.
template <template <int> class Kernel, int... Ms>
constexpr std::array<TileFn, sizeof...(Ms) + 1> tile_table(std::integer_sequence<int, Ms...>) {
  return {nullptr, &Kernel<Ms + 1>::run...};
}
template <int M>
struct Generic {
  static void run(const float* p, const float* in, int64_t s, int64_t kb, float* c, bool f) {
    tile_generic<M>(p, in, s, kb, c, f);
  }
};
#if MQ_X86
template <int M>
struct Avx512 {
  static void run(const float* p, const float* in, int64_t s, int64_t kb, float* c, bool f) {
    tile_avx512<M>(p, in, s, kb, c, f);
  }
};
template <int M>
struct Avx2 {
  static void run(const float* p, const float* in, int64_t s, int64_t kb, float* c, bool f) {
    tile_avx2<M>(p, in, s, kb, c, f);
  }
};
#endif

struct TileSet {
  int max_tokens;
  const TileFn* tiles;  // tiles[m], m in 1..max_tokens
};

TileSet tiles_for(SimdLevel level) {
  static constexpr auto generic = tile_table<Generic>(std::make_integer_sequence<int, 4>());
#if MQ_X86
  static constexpr auto avx512 = tile_table<Avx512>(std::make_integer_sequence<int, 12>());
  static constexpr auto avx2 = tile_table<Avx2>(std::make_integer_sequence<int, 6>());
  if (level == SimdLevel::kAvx512) return {12, avx512.data()};
  if (level == SimdLevel::kAvx2) return {6, avx2.data()};
#endif
  (void)level;
  return {4, generic.data()};
}

void gemm(const WeightMatrix& w, const float* in, int64_t tokens, float* out, ThreadPool& pool) {
  const int64_t rows = w.rows, K = w.cols, panels = (rows + kPanelRows - 1) / kPanelRows;
  pool.parallel_for(size_t(panels), [&](size_t p0, size_t p1) {
    std::vector<float> packed(size_t(K * kPanelRows)), c(size_t(tokens * kPanelRows));
    for (size_t p = p0; p < p1; ++p) {
      const int64_t r0 = int64_t(p) * kPanelRows, valid = std::min(kPanelRows, rows - r0);
      pack_panel(w, r0, packed.data());
      panel_product(packed.data(), K, in, K, tokens, c.data());
      for (int64_t t = 0; t < tokens; ++t)
        std::memcpy(out + t * rows + r0, c.data() + t * kPanelRows, size_t(valid) * sizeof(float));
    }
  });
}

// ---- decode: bf16 GEMV -----------------------------------------------------------------------
// x split into even and odd elements; a row's 32-bit word i holds W[r, 2i] in its low half and
// W[r, 2i + 1] in its high half. Both vector kernels keep 16 partial sums per parity (one zmm, or
// two ymm for lanes 0-7 and 8-15) and reduce them in the same order, so they agree bit for bit.

// Sum of the 16 even and 16 odd lanes, then the scalar tail from word `tail` on.
float finish_row(const float* even_lanes, const float* odd_lanes, const uint32_t* row, const float* xe,
                 const float* xo, int64_t tail, int64_t words) {
  float sum = 0;
  for (int j = 0; j < 16; ++j) sum += even_lanes[j] + odd_lanes[j];
  for (int64_t i = tail; i < words; ++i) {
    sum += std::bit_cast<float>(row[i] << 16) * xe[i];
    sum += std::bit_cast<float>(row[i] & 0xFFFF0000u) * xo[i];
  }
  return sum;
}

#if MQ_X86
// v << 16 per 32-bit lane. The masked form with v as its own pass-through: GCC 12 warns that the
// plain _mm512_slli_epi32's internal undefined operand may be used uninitialized (GCC bug 105593).
MQ_TARGET_AVX512 inline __m512i shifted(__m512i v) { return _mm512_mask_slli_epi32(v, __mmask16(0xFFFF), v, 16); }

MQ_TARGET_AVX512 float gemv_row_avx512(const uint32_t* row, const float* xe, const float* xo, int64_t words) {
  __m512 even = _mm512_setzero_ps(), odd = _mm512_setzero_ps();
  const __m512i high = _mm512_set1_epi32(int(0xFFFF0000u));
  int64_t i = 0;
  for (; i + 16 <= words; i += 16) {
    const __m512i v = _mm512_loadu_si512(row + i);
    even = _mm512_fmadd_ps(_mm512_castsi512_ps(shifted(v)), _mm512_loadu_ps(xe + i), even);
    odd = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v, high)), _mm512_loadu_ps(xo + i), odd);
  }
  alignas(64) float el[16], ol[16];
  _mm512_store_ps(el, even);
  _mm512_store_ps(ol, odd);
  return finish_row(el, ol, row, xe, xo, i, words);
}

MQ_TARGET_AVX2 float gemv_row_avx2(const uint32_t* row, const float* xe, const float* xo, int64_t words) {
  __m256 even[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, odd[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const __m256i high = _mm256_set1_epi32(int(0xFFFF0000u));
  int64_t i = 0;
  for (; i + 16 <= words; i += 16) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + i + h * 8));
      even[h] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), _mm256_loadu_ps(xe + i + h * 8), even[h]);
      odd[h] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v, high)), _mm256_loadu_ps(xo + i + h * 8), odd[h]);
    }
  }
  alignas(32) float el[16], ol[16];
  _mm256_store_ps(el, even[0]);
  _mm256_store_ps(el + 8, even[1]);
  _mm256_store_ps(ol, odd[0]);
  _mm256_store_ps(ol + 8, odd[1]);
  return finish_row(el, ol, row, xe, xo, i, words);
}

// Rows [r0, r1) of a bf16 matrix with an even number of columns, at a vector level.
void gemv_bf16_rows(const WeightMatrix& w, const float* xe, const float* xo, int64_t r0, int64_t r1, float* out,
                    SimdLevel level) {
  const int64_t words = w.cols / 2;
  const auto* base = reinterpret_cast<const uint32_t*>(w.data);
  const auto row = level == SimdLevel::kAvx512 ? &gemv_row_avx512 : &gemv_row_avx2;
  for (int64_t r = r0; r < r1; ++r) out[r] = row(base + r * words, xe, xo, words);
}
#endif

void gemv(const WeightMatrix& w, const float* x, float* out, ThreadPool& pool) {
  const SimdLevel level = simd_level();
  if (!MQ_X86 || w.dtype != DType::BF16 || w.cols % 2 != 0 || level == SimdLevel::kGeneric) {
    pool.parallel_for(size_t(w.rows), [&](size_t r0, size_t r1) {
      for (size_t r = r0; r < r1; ++r) out[r] = dot_row(w, int64_t(r), x);
    }, 64);
    return;
  }
  const int64_t words = w.cols / 2;
  std::vector<float> split(size_t(2 * words));
  float *xe = split.data(), *xo = split.data() + words;
  for (int64_t i = 0; i < words; ++i) {
    xe[i] = x[2 * i];
    xo[i] = x[2 * i + 1];
  }
#if MQ_X86
  pool.parallel_for(size_t(w.rows), [&](size_t r0, size_t r1) {
    gemv_bf16_rows(w, xe, xo, int64_t(r0), int64_t(r1), out, level);
  }, 64);
#endif
}

}  // namespace

SimdLevel detected_simd_level() {
  static const SimdLevel level = probe_simd_level();
  return level;
}

SimdLevel simd_level() { return active_level().load(std::memory_order_relaxed); }

SimdLevel set_simd_level(SimdLevel level) {
  const SimdLevel clamped = std::min(level, detected_simd_level());
  active_level().store(clamped, std::memory_order_relaxed);
  return clamped;
}

std::string_view simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512: return "avx512";
    case SimdLevel::kAvx2: return "avx2";
    default: return "generic";
  }
}

// k blocks outermost: a block of the panel (32 KiB) stays in L1 while every tile of tokens uses it.
void panel_product(const float* panel, int64_t K, const float* in, int64_t in_stride, int64_t tokens, float* c) {
  const TileSet set = tiles_for(simd_level());
  if (K == 0) std::fill(c, c + tokens * kPanelRows, 0.0f);
  for (int64_t k0 = 0; k0 < K; k0 += kKBlock) {
    const int64_t kb = std::min(kKBlock, K - k0);
    for (int64_t t = 0; t < tokens; t += set.max_tokens) {
      const int64_t m = std::min<int64_t>(set.max_tokens, tokens - t);
      set.tiles[m](panel + k0 * kPanelRows, in + t * in_stride + k0, in_stride, kb, c + t * kPanelRows, k0 == 0);
    }
  }
}

void matmul(const WeightMatrix& w, const float* in, int64_t tokens, float* out, ThreadPool& pool) {
  if (tokens == 1)
    gemv(w, in, out, pool);
  else if (tokens > 1)
    gemm(w, in, tokens, out, pool);
}

}  // namespace megaqwen::cpu

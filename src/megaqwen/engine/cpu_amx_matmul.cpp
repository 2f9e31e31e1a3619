// AMX prefill products. A tile register holds 16 rows of 64 bytes; tdpbf16ps multiplies a 16 x 32
// bf16 tile A by a 32 x 16 bf16 tile B stored as 16 rows of 16 (k, k + 1) pairs, adding into a
// 16 x 16 fp32 tile C: 8,192 products per instruction, against 16 per AVX-512 FMA.
//
// Layout: the input is rounded to bf16 and stored as 32-bit words (a k-pair, the even k in the low
// half), [tokens][words], so 16 tokens x 16 words is an A tile read in place. The weights are packed
// a panel of 32 rows at a time as words [word][32] (the same 16 x 16 register transposes as the fp32
// packing, no widening), so a B tile is 16 words x 16 rows, two per panel. Per block of 32 tokens the
// kernel keeps 2 x 2 C tiles, loading two A and two B tiles per 32 values of k: tiles 0-3 C, 4-5 A,
// 6-7 B. Tokens and words are padded with zeros to whole tiles.
//
// Like the fp32 GEMM, k is never split across threads (the result does not depend on the thread
// count), but the tile unit's sums are not those of the FMA kernels: each C element accumulates the
// pairs of its 32 k in an order of the hardware's, with denormals flushed. Hence opt-in.
#include "megaqwen/engine/cpu_amx_matmul.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "megaqwen/engine/cpu_transpose16.h"
#include "megaqwen/util/bf16.h"
#include "megaqwen/util/error.h"

#if defined(__x86_64__)
#include <asm/prctl.h>
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace megaqwen::cpu {

#if defined(__x86_64__)
namespace {

constexpr int64_t kPanelRows = 32;   // output columns per panel: two B / C tiles of 16
constexpr int64_t kTileWords = 16;   // words (32 values of k) per tile step: 64 bytes per tile row
constexpr int64_t kTokenBlock = 32;  // tokens per block: two A / C tiles of 16
constexpr int64_t kPackWordBlock = 32;  // words per packing pass: 128 bytes of each of the 32 rows

// The 64-byte operand of ldtilecfg (palette 1: 8 tiles of at most 16 rows x 64 bytes).
struct TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// The tile instructions as inline assembly. GCC 12's intrinsics declare that ldtilecfg reads 8
// bytes and that tileloadd reads no memory, so the compiler may drop or reorder the stores they
// depend on (at -O2 the configuration's zeroing went, and ldtilecfg faulted); these declare what they
// read and write.
inline void load_tile_config(const TileConfig& config) { asm volatile("ldtilecfg %0" ::"m"(config)); }
inline void release_tiles() { asm volatile("tilerelease" ::); }
#define MQ_TILE_ZERO(t) asm volatile("tilezero %%tmm" #t ::)
#define MQ_TILE_LOAD(t, base, stride) \
  asm volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"(int64_t(stride)) : "memory")
#define MQ_TILE_STORE(t, base, stride) \
  asm volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"(int64_t(stride)) : "memory")
#define MQ_TILE_DPBF16(c, a, b) asm volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

TileConfig full_tiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = 16;
    config.bytes_per_row[t] = 64;
  }
  return config;
}

// c[t * c_row + j] = sum over words p < words of (hi[t][p] + lo[t][p]) . panel[p][j], for the 32
// tokens of one block and j < 32 (lo null: hi alone). `words` is a multiple of kTileWords; the input
// rows are `words` apart.
void block_product(const uint32_t* panel, const uint32_t* hi, const uint32_t* lo, int64_t words, float* c,
                   int64_t c_row) {
  MQ_TILE_ZERO(0);
  MQ_TILE_ZERO(1);
  MQ_TILE_ZERO(2);
  MQ_TILE_ZERO(3);
  const int64_t in_stride = words * 4, panel_stride = kPanelRows * 4;
  for (int64_t p = 0; p < words; p += kTileWords) {
    MQ_TILE_LOAD(4, hi + p, in_stride);
    MQ_TILE_LOAD(5, hi + 16 * words + p, in_stride);
    MQ_TILE_LOAD(6, panel + p * kPanelRows, panel_stride);
    MQ_TILE_LOAD(7, panel + p * kPanelRows + 16, panel_stride);
    MQ_TILE_DPBF16(0, 4, 6);
    MQ_TILE_DPBF16(1, 4, 7);
    MQ_TILE_DPBF16(2, 5, 6);
    MQ_TILE_DPBF16(3, 5, 7);
    if (lo) {  // the same weights against the input's remainder
      MQ_TILE_LOAD(4, lo + p, in_stride);
      MQ_TILE_LOAD(5, lo + 16 * words + p, in_stride);
      MQ_TILE_DPBF16(0, 4, 6);
      MQ_TILE_DPBF16(1, 4, 7);
      MQ_TILE_DPBF16(2, 5, 6);
      MQ_TILE_DPBF16(3, 5, 7);
    }
  }
  const int64_t c_stride = c_row * 4;
  MQ_TILE_STORE(0, c, c_stride);
  MQ_TILE_STORE(1, c + 16, c_stride);
  MQ_TILE_STORE(2, c + 16 * c_row, c_stride);
  MQ_TILE_STORE(3, c + 16 * c_row + 16, c_stride);
}

// 16 x 16 blocks of words transposed in registers; returns how many words it did (a multiple of 16).
#pragma GCC diagnostic push
#if !defined(__clang__)  // clang has no such warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // the intrinsics' unused _mm512_undefined_* operands
#endif
__attribute__((target("avx512f"))) int64_t pack_words_avx512(const uint32_t* base, int64_t words, uint32_t* packed) {
  const int64_t done = words / 16 * 16;
  for (int64_t w0 = 0; w0 < done; w0 += kPackWordBlock)
    for (int64_t half = 0; half < 2; ++half)  // rows 0-15, then 16-31, each reading its lines whole
      for (int64_t p0 = w0; p0 < std::min(w0 + kPackWordBlock, done); p0 += 16) {
        __m512 r[16];
        for (int j = 0; j < 16; ++j)
          r[j] = _mm512_castsi512_ps(_mm512_loadu_si512(base + (half * 16 + j) * words + p0));
        transpose16_store(r, reinterpret_cast<float*>(packed + p0 * kPanelRows + half * 16), kPanelRows);
      }
  return done;
}
#pragma GCC diagnostic pop

// packed[p * 32 + j] = word p of row r0 + j for p < padded_words: zero past the row's words (and the
// high half of an odd K's last word) and for rows past the matrix's end.
void pack_panel(const WeightMatrix& w, int64_t r0, int64_t padded_words, uint32_t* packed) {
  const int64_t K = w.cols, words = (K + 1) / 2, valid = std::min(kPanelRows, w.rows - r0);
  const auto* base = reinterpret_cast<const uint16_t*>(w.data) + r0 * K;
  int64_t start = 0;
  if (valid == kPanelRows && K % 2 == 0)  // AMX implies AVX-512
    start = pack_words_avx512(reinterpret_cast<const uint32_t*>(base), words, packed);
  for (int64_t p = start; p < padded_words; ++p)
    for (int64_t j = 0; j < kPanelRows; ++j) {
      uint32_t word = 0;
      if (j < valid && p < words) {
        const uint16_t* row = base + j * K;
        word = uint32_t(row[2 * p]) | (2 * p + 1 < K ? uint32_t(row[2 * p + 1]) << 16 : 0u);
      }
      packed[p * kPanelRows + j] = word;
    }
}

bool request_amx(std::string& why) {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx & (1u << 24)) || !(edx & (1u << 22))) {
    why = "this processor has no AMX-BF16";
    return false;
  }
  // Linux hands out the 8 KB tile state only to processes that ask (XFEATURE_XTILEDATA = 18).
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, 18) != 0) {
    why = "the kernel refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM)";
    return false;
  }
  return true;
}

}  // namespace

bool amx_available(std::string* why) {
  static std::string reason;
  static const bool available = request_amx(reason);
  if (why) *why = reason;
  return available;
}

void matmul_amx_bf16(const WeightMatrix& w, const float* in, int64_t tokens, float* out, ThreadPool& pool,
                     AmxInput input) {
  if (!amx_available()) fail("matmul_amx_bf16: AMX is not available here");
  if (w.dtype != DType::BF16) fail("matmul_amx_bf16: {} is not bf16", w.name ? *w.name : std::string("the matrix"));
  const int64_t rows = w.rows, K = w.cols, words = (K + 1) / 2;
  const int64_t padded_words = (words + kTileWords - 1) / kTileWords * kTileWords;
  const int64_t padded_tokens = (tokens + kTokenBlock - 1) / kTokenBlock * kTokenBlock;
  const int64_t panels = (rows + kPanelRows - 1) / kPanelRows;
  // Buffers kept per thread between calls: allocating them for each product cost ~6% of a prefill
  // in page faults.
  const bool split = input == AmxInput::kSplit;
  const size_t plane = size_t(padded_tokens * padded_words);
  thread_local std::vector<uint32_t> pairs;
  pairs.assign(split ? 2 * plane : plane, 0u);
  uint32_t* a = pairs.data();
  uint32_t* a_lo = split ? a + plane : nullptr;
  pool.parallel_for(size_t(tokens), [&](size_t t0, size_t t1) {
    for (size_t t = t0; t < t1; ++t) {
      const float* x = in + int64_t(t) * K;
      uint32_t* row = a + int64_t(t) * padded_words;
      for (int64_t p = 0; p < words; ++p) {
        const float x0 = x[2 * p], x1 = 2 * p + 1 < K ? x[2 * p + 1] : 0.0f;
        const uint16_t h0 = f32_to_bf16(x0), h1 = f32_to_bf16(x1);
        row[p] = uint32_t(h0) | uint32_t(h1) << 16;
        if (split)  // the remainder, itself rounded: hi + lo holds ~16 significant bits of x
          a_lo[int64_t(t) * padded_words + p] =
              uint32_t(f32_to_bf16(x0 - bf16_to_f32(h0))) | uint32_t(f32_to_bf16(x1 - bf16_to_f32(h1))) << 16;
      }
    }
  });
  const TileConfig config = full_tiles();
  // Blocking for the L2 cache (2 MB a core on Sapphire Rapids): a group of panels (~1 MB packed) is
  // packed once and then met by the input a span of tokens (~512 KB of words) at a time, so neither
  // streams from L3 per tile. Walking all tokens per panel instead re-read the whole input per panel,
  // which at 512 tokens with the split input (2 MB) ran at a third of the tile units' rate.
  const int64_t panel_words = padded_words * kPanelRows;
  const int64_t group = std::max<int64_t>(1, (int64_t(1) << 20) / (panel_words * 4));
  const int64_t span = std::max<int64_t>(
      kTokenBlock, (int64_t(512) << 10) / (padded_words * 4 * (split ? 2 : 1)) / kTokenBlock * kTokenBlock);
  pool.parallel_for(size_t(panels), [&](size_t p0, size_t p1) {
    load_tile_config(config);  // per thread: the tile configuration is thread state
    thread_local std::vector<uint32_t> packed;
    thread_local std::vector<float> c;
    packed.resize(size_t(std::min<int64_t>(group, int64_t(p1 - p0)) * panel_words));
    c.resize(size_t(kTokenBlock * kPanelRows));
    for (int64_t g0 = int64_t(p0); g0 < int64_t(p1); g0 += group) {
      const int64_t g1 = std::min(int64_t(p1), g0 + group);
      for (int64_t p = g0; p < g1; ++p) pack_panel(w, p * kPanelRows, padded_words, packed.data() + (p - g0) * panel_words);
      for (int64_t s0 = 0; s0 < tokens; s0 += span)
        for (int64_t p = g0; p < g1; ++p) {
          const int64_t r0 = p * kPanelRows, valid = std::min(kPanelRows, rows - r0);
          const uint32_t* panel = packed.data() + (p - g0) * panel_words;
          for (int64_t t0 = s0; t0 < std::min(tokens, s0 + span); t0 += kTokenBlock) {
            const uint32_t* hi = a + t0 * padded_words;
            const uint32_t* lo = split ? a_lo + t0 * padded_words : nullptr;
            if (valid == kPanelRows && t0 + kTokenBlock <= tokens) {  // whole tiles: straight into the output
              block_product(panel, hi, lo, padded_words, out + t0 * rows + r0, rows);
              continue;
            }
            block_product(panel, hi, lo, padded_words, c.data(), kPanelRows);
            for (int64_t t = t0; t < std::min(tokens, t0 + kTokenBlock); ++t)
              std::memcpy(out + t * rows + r0, c.data() + (t - t0) * kPanelRows, size_t(valid) * sizeof(float));
          }
        }
    }
    release_tiles();
  });
}

#else

bool amx_available(std::string* why) {
  if (why) *why = "AMX is an x86-64 feature";
  return false;
}

void matmul_amx_bf16(const WeightMatrix&, const float*, int64_t, float*, ThreadPool&, AmxInput) {
  fail("matmul_amx_bf16: AMX is not available here");
}

#endif

}  // namespace megaqwen::cpu

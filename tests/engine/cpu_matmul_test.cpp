// cpu::matmul (cpu_matmul.cpp) against a double-precision reference, at every SIMD level this
// processor has: shapes around the kernels' edges (a 32-row panel, the 256-value k blocks, the
// 4 / 6 / 12-token micro-tiles, odd column counts), each weight dtype, outputs poisoned with NaN so
// an unwritten element shows. The FMA levels must agree bit for bit, and threads must not matter.
// Also the AMX products of --amx-prefill (cpu_amx_matmul.h), where the processor has them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "megaqwen/engine/cpu_amx_matmul.h"
#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/engine/cpu_simd.h"
#include "megaqwen/util/bf16.h"
#include "megaqwen/util/error.h"
#include "megaqwen/util/thread_pool.h"

namespace megaqwen {
namespace {

using cpu::SimdLevel;

// Restores the detected level when a test leaves.
class SimdLevelGuard {
 public:
  ~SimdLevelGuard() { cpu::set_simd_level(cpu::detected_simd_level()); }
};

std::vector<SimdLevel> available_levels() {
  std::vector<SimdLevel> levels;
  for (SimdLevel l : {SimdLevel::kGeneric, SimdLevel::kAvx2, SimdLevel::kAvx512})
    if (l <= cpu::detected_simd_level()) levels.push_back(l);
  return levels;
}

struct Matrix {
  std::vector<uint8_t> bytes;
  std::vector<double> values;  // exactly what the stored weights hold
  std::string name = "w";
  WeightMatrix w;
};

Matrix random_matrix(int64_t rows, int64_t cols, DType dtype, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Matrix m;
  m.bytes.resize(size_t(rows * cols) * dtype_size(dtype));
  m.values.resize(size_t(rows * cols));
  for (size_t i = 0; i < m.values.size(); ++i) {
    const float x = normal(rng);
    if (dtype == DType::BF16) {
      const uint16_t b = f32_to_bf16(x);
      std::memcpy(&m.bytes[i * 2], &b, 2);
      m.values[i] = bf16_to_f32(b);
    } else if (dtype == DType::F16) {
      const uint16_t h = f32_to_f16(x);
      std::memcpy(&m.bytes[i * 2], &h, 2);
      m.values[i] = f16_to_f32(h);
    } else {
      std::memcpy(&m.bytes[i * 4], &x, 4);
      m.values[i] = x;
    }
  }
  m.w = {.data = m.bytes.data(), .dtype = dtype, .rows = rows, .cols = cols, .name = &m.name};
  return m;
}

std::vector<float> run(const Matrix& m, const std::vector<float>& in, int64_t tokens, ThreadPool& pool) {
  std::vector<float> out(size_t(tokens * m.w.rows), std::numeric_limits<float>::quiet_NaN());
  cpu::matmul(m.w, in.data(), tokens, out.data(), pool);
  return out;
}

// Every element within 1e-5 of the sum of |terms| of the exact result. Leaving out one of `cols`
// terms, or using a neighbouring row or token, errs by ~1/cols of that sum, far above the bound;
// fp32 rounding over the kernels' 256-term partial sums stays below it.
void expect_close(const Matrix& m, const std::vector<float>& in, int64_t tokens, const std::vector<float>& out,
                  const std::string& what, double bound = 1e-5) {
  const int64_t rows = m.w.rows, cols = m.w.cols;
  int failures = 0;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double exact = 0, magnitude = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const double term = double(in[size_t(t * cols + k)]) * m.values[size_t(r * cols + k)];
        exact += term;
        magnitude += std::fabs(term);
      }
      const float got = out[size_t(t * rows + r)];
      if (!(std::fabs(got - exact) <= bound * magnitude + 1e-30) && ++failures <= 5)
        ADD_FAILURE() << what << ": out[" << t << ", " << r << "] = " << got << ", exact " << exact;
    }
}

TEST(CpuMatmul, MatchesExactProductAtEveryLevelShapeAndDtype) {
  SimdLevelGuard guard;
  ThreadPool pool(2);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (SimdLevel level : available_levels()) {
    ASSERT_EQ(cpu::set_simd_level(level), level);
    for (DType dtype : {DType::BF16, DType::F16, DType::F32})
      for (int64_t rows : {1, 5, 32, 33, 70})
        for (int64_t cols : {1, 2, 7, 32, 255, 256, 257, 530})
          for (int64_t tokens : {1, 2, 4, 5, 6, 7, 12, 13, 25}) {
            const Matrix m = random_matrix(rows, cols, dtype, rng);
            std::vector<float> in(size_t(tokens * cols));
            for (float& x : in) x = normal(rng);
            const std::string what = std::string(cpu::simd_level_name(level)) + " " + dtype_name(dtype) + " " +
                                     std::to_string(rows) + "x" + std::to_string(cols) + " tokens " +
                                     std::to_string(tokens);
            expect_close(m, in, tokens, run(m, in, tokens, pool), what);
          }
  }
}

TEST(CpuMatmul, FmaLevelsAgreeBitForBit) {
  SimdLevelGuard guard;
  if (cpu::detected_simd_level() < SimdLevel::kAvx512) GTEST_SKIP() << "this processor has no AVX-512";
  ThreadPool pool(2);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t tokens : {1, 3, 12, 19}) {
    const Matrix m = random_matrix(45, 1030, DType::BF16, rng);
    std::vector<float> in(size_t(tokens * 1030));
    for (float& x : in) x = normal(rng);
    cpu::set_simd_level(SimdLevel::kAvx2);
    const std::vector<float> avx2 = run(m, in, tokens, pool);
    cpu::set_simd_level(SimdLevel::kAvx512);
    const std::vector<float> avx512 = run(m, in, tokens, pool);
    ASSERT_EQ(std::memcmp(avx2.data(), avx512.data(), avx2.size() * sizeof(float)), 0) << "tokens " << tokens;
  }
}

TEST(CpuMatmul, ThreadCountDoesNotChangeTheResult) {
  ThreadPool one(1), three(3);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t tokens : {1, 9}) {
    const Matrix m = random_matrix(200, 300, DType::BF16, rng);
    std::vector<float> in(size_t(tokens * 300));
    for (float& x : in) x = normal(rng);
    const std::vector<float> a = run(m, in, tokens, one), b = run(m, in, tokens, three);
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "tokens " << tokens;
  }
}

TEST(CpuMatmul, LevelIsClampedToWhatTheProcessorHas) {
  SimdLevelGuard guard;
  EXPECT_EQ(cpu::set_simd_level(SimdLevel::kAvx512), cpu::detected_simd_level());
  EXPECT_EQ(cpu::simd_level(), cpu::detected_simd_level());
  EXPECT_EQ(cpu::set_simd_level(SimdLevel::kGeneric), SimdLevel::kGeneric);
  EXPECT_EQ(cpu::simd_level(), SimdLevel::kGeneric);
}

// The AMX products (--amx-prefill): with the input rounded, against the exact sum of the rounded
// input times the weights (the products are exact; only fp32 summation errs, within the same 1e-5 of
// the terms' magnitude); with the input split into hi + lo, against the exact product of the fp32
// input (hi + lo keeps ~16 bits: 2^-17 relative, so 2e-5 of the magnitude). Shapes around the tiles'
// edges: 16 / 32 tokens, 16 / 32 rows, 32 values of k per tile step, odd and short K, panels past the
// matrix's end. Outputs poisoned with NaN; threads must not matter.
TEST(CpuAmxMatmul, MatchesExactProductsWithRoundedAndSplitInput) {
  std::string why;
  if (!cpu::amx_available(&why)) GTEST_SKIP() << why;
  ThreadPool pool(2), one(1);
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t rows : {1, 16, 31, 32, 33, 100})
    for (int64_t cols : {1, 2, 3, 31, 32, 33, 64, 1000, 1030})
      for (int64_t tokens : {2, 15, 16, 17, 32, 33, 70}) {
        const Matrix m = random_matrix(rows, cols, DType::BF16, rng);
        std::vector<float> in(size_t(tokens * cols)), rounded(in.size());
        for (size_t i = 0; i < in.size(); ++i) {
          in[i] = normal(rng);
          rounded[i] = bf16_to_f32(f32_to_bf16(in[i]));
        }
        const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " tokens " + std::to_string(tokens);
        for (cpu::AmxInput input : {cpu::AmxInput::kRounded, cpu::AmxInput::kSplit}) {
          const bool split = input == cpu::AmxInput::kSplit;
          std::vector<float> out(size_t(tokens * rows), std::numeric_limits<float>::quiet_NaN());
          cpu::matmul_amx_bf16(m.w, in.data(), tokens, out.data(), pool, input);
          expect_close(m, split ? in : rounded, tokens, out, what + (split ? " split" : " rounded"), split ? 2e-5 : 1e-5);
          std::vector<float> alone(out.size(), std::numeric_limits<float>::quiet_NaN());
          cpu::matmul_amx_bf16(m.w, in.data(), tokens, alone.data(), one, input);
          ASSERT_EQ(std::memcmp(out.data(), alone.data(), out.size() * sizeof(float)), 0) << what;
        }
      }
}

TEST(CpuAmxMatmul, RefusesWhatItCannotRun) {
  std::string why;
  if (!cpu::amx_available(&why)) {
    EXPECT_FALSE(why.empty());  // says why not
    GTEST_SKIP() << why;
  }
  ThreadPool pool(1);
  std::mt19937 rng(1);
  const Matrix f32 = random_matrix(4, 8, DType::F32, rng);
  std::vector<float> in(16, 1.0f), out(8);
  EXPECT_THROW(cpu::matmul_amx_bf16(f32.w, in.data(), 2, out.data(), pool), Error);
}

// The plain vectorized loops (cpu::dot, axpy, the norms; MQ_VECTOR_CLONES) must run their AVX2+FMA
// clone wherever the processor has AVX2 and FMA. A fused multiply-add shows: lane 0 of dot adds
// x * y = 1 + 2^-11 + 2^-24 to -(1 + 2^-11); rounding the product first (the SSE2 default) loses
// the 2^-24. The clones were once picked by CPU model and every AMD machine ran the default.
TEST(CpuVectorClones, ProcessorsWithFmaRunTheFmaClone) {
#if defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA here";
  std::vector<float> a(32, 0.0f), b(32, 0.0f);
  a[0] = -(1.0f + 0x1p-11f), b[0] = 1.0f;
  a[16] = b[16] = 1.0f + 0x1p-12f;  // the same lane as element 0 in every lane layout up to 16 wide
  EXPECT_EQ(cpu::dot(a.data(), b.data(), 32), 0x1p-24f) << "cpu::dot rounded the product: the SSE2 clone ran";
#else
  GTEST_SKIP() << "vector clones are built with GCC on x86-64 only, not under ThreadSanitizer";
#endif
}

}  // namespace
}  // namespace megaqwen

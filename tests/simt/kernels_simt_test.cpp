// The per-operator decode kernels of src/megaqwen/cuda/kernels/*.cuh executed on the host by the simt
// emulator (simt.h): the real __global__ functions, called inside simt::launch with the grid and block
// shapes of their launchers in kernels.cu, on fresh seeded random inputs, checked against the CPU
// reference ops (engine/cpu_ops.h) and the CPU Sampler. The CPU-only counterpart of
// tests/cuda/kernels_test.cpp and tests/cuda/sampling_test.cpp (attention_prefill_kernel is not
// covered: it uses extern __shared__). Every output buffer is poisoned (NaN, or -7 for ids) before a
// launch and has a poisoned guard tail, so an element the kernel forgot or one it wrote out of bounds
// shows.
//
// Thresholds: error = max|kernel - reference| / max|reference| (a non-finite kernel value counts as
// infinite), as in the GPU tests; the largest error this suite observes is given with each:
//   1e-5   fp32 results whose arithmetic differs from the reference only in the order or precision of
//          a sum (rms_norm: fp32 tree vs fp64 sequential, observed 2e-7; gemv: lane-strided fmaf +
//          shuffle tree vs the CPU's vectorized dot, 1.1e-6 at K = 3072; qk_norm_rope's q: fp32 vs
//          fp64 sum of squares, 1.6e-7): an order or more above the rounding noise and far below any
//          indexing or formula mistake (one wrong term of a 1024-term dot moves it by ~1e-3).
//   4e-5   a bf16 split hi + lo against the fp32 reference: the split keeps ~16 significant bits
//          (2^-16 ~ 1.5e-5 relative per element), plus the fp32 noise above (observed 6e-6).
//   1/256  a bf16 k cache row whose fp32 value can differ in the last bits from the CPU's, and so
//          round to the neighbouring bf16 (one step, 2^-8 relative at most; observed 0).
//   2e-5   decode attention (exp2f online softmax in fp32, split merge) against cpu::causal_attention
//          (fp32 exp, another order): observed 2.9e-6.
//   exact  where the emulator executes the same IEEE operations as the reference: embedding rows,
//          bf16 splits of a value both sides compute identically (split_bf16, swiglu_split, and the
//          rms_norm split against the kernel's own fp32 output), the gemv Add and SwiGLU epilogues
//          against the Store kernel's sums, the v cache, token counts, the logit transform (the
//          kernel's __fmul_rn / __fadd_rn match the Sampler's arithmetic bit for bit; Gumbel noise
//          with the same libm), argmax ids, and filtered draws (the exact host draw: the Sampler's
//          transformed logits, the kernel's candidates and its fp64 arithmetic, u = uniform_at(seed,
//          step, 0xffffffff)). The draws are also checked statistically against Sampler::distribution
//          (bound stated at the test).
//
// Emulator specifics. The kernels declare function-scope __shared__ variables; the emulator leaves
// __shared__ undefined (a host variable cannot be per block in general), but simt::launch runs the
// blocks of a grid one after another, never two at once, so a function-scope `static` is exactly
// per-block shared memory here (its contents carry over from the previous block or launch, which is as
// undefined as uninitialized shared memory is on a GPU). Sizes are kept small (the emulator costs
// ~30 ns per thread per synchronization point): the suite runs in ~3.5 s in a Debug build, two
// thirds of it the 1,000 emulated draws of the statistical test.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

// ---- CUDA names the emulator lacks, defined for this file (candidates for simt.h) ----
// Function-scope __shared__ variables as per-block statics: valid because simt::launch runs the blocks
// of a grid sequentially (see the top of this file). Only for the kernel headers below.
#define __shared__ static
// (cudaStream_t, needed by kernels.h's launcher declarations, comes from shim/cuda_runtime_api.h.)
// ---- end of the local CUDA names ----

#include "megaqwen/cuda/kernels/attention_decode.cuh"  // all through shim/: the emulator
#include "megaqwen/cuda/kernels/elementwise.cuh"
#include "megaqwen/cuda/kernels/gemv_bf16.cuh"
#include "megaqwen/cuda/kernels/rmsnorm.cuh"
#include "megaqwen/cuda/kernels/rope_qknorm.cuh"
#include "megaqwen/cuda/kernels/sampling.cuh"
#include "megaqwen/cuda/kernels/swiglu.cuh"

#undef __shared__

#include "megaqwen/engine/cpu_ops.h"
#include "megaqwen/sampling/sampler.h"
#include "megaqwen/util/bf16.h"
#include "megaqwen/util/thread_pool.h"
#include "simt/host_draw.h"

namespace megaqwen {
namespace {

using cuda::bf16;
using simt::Order;
using test::counts_of;
using test::lowest_argmax;
using test::sampler_transformed;

constexpr double kFp32Tolerance = 1e-5;
constexpr double kSplitTolerance = 4e-5;
constexpr double kBf16Tolerance = 1.0 / 256;
constexpr double kAttentionTolerance = 2e-5;
constexpr size_t kGuard = 37;  // poisoned elements after every output: none may be written

// ---------------------------------------------------------------------------------------------
// Helpers

std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}
std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}
std::vector<float> from_bf16(std::span<const uint16_t> v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(v[i]);
  return out;
}
const bf16* as_bf16(const uint16_t* p) { return reinterpret_cast<const bf16*>(p); }
bf16* as_bf16(uint16_t* p) { return reinterpret_cast<bf16*>(p); }

// n outputs plus the guard tail, all NaN (0xffffffff; 0xffff is a bf16 NaN).
std::vector<float> poisoned_f32(size_t n) {
  std::vector<float> v(n + kGuard);
  std::memset(v.data(), 0xff, v.size() * sizeof(float));
  return v;
}
std::vector<uint16_t> poisoned_bf16(size_t n) { return std::vector<uint16_t>(n + kGuard, 0xffff); }
// The guard tail of a poisoned buffer of n outputs is untouched.
bool guard_intact(std::span<const float> v, size_t n) {
  for (size_t i = n; i < v.size(); ++i)
    if (std::bit_cast<uint32_t>(v[i]) != 0xffffffffu) return false;
  return true;
}
bool guard_intact(std::span<const uint16_t> v, size_t n) {
  for (size_t i = n; i < v.size(); ++i)
    if (v[i] != 0xffff) return false;
  return true;
}

// max|a - b| / max|b| over b's elements; a non-finite a counts as infinite error.
double rel_error(std::span<const float> a, std::span<const float> b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::isfinite(a[i]) ? std::abs(double(a[i]) - double(b[i])) : INFINITY);
    ref = std::max(ref, std::abs(double(b[i])));
  }
  return ref > 0 ? diff / ref : diff;
}

WeightVector f32_vector(const std::vector<float>& w) {
  return WeightVector{reinterpret_cast<const uint8_t*>(w.data()), DType::F32, int64_t(w.size())};
}

// The launchers' grid for a grid-stride elementwise kernel and for argmax (kernels.cu, not compiled here).
int elementwise_blocks(size_t n, int threads) {
  return int(std::min<size_t>((n + size_t(threads) - 1) / size_t(threads), 65535 * 8));
}
int argmax_blocks(int V) { return std::clamp(cuda::div_up(V, 4 * cuda::kArgmaxThreads), 1, 264); }

simt::Options threads_in(Order order, uint64_t seed = 1) {
  simt::Options o;
  o.threads = order;
  o.seed = seed;
  return o;
}

// ---------------------------------------------------------------------------------------------
// Elementwise kernels

// embed_rows_kernel: <<<T, 128>>>; each row is the bf16 table row widened to fp32, exactly.
// hidden 2056 gives 257 groups of 8: thread 0 takes a second step.
TEST(SimtKernels, EmbedRows) {
  const int V = 300;
  const std::vector<int32_t> tokens = {0, 299, 17, 17, 150};
  for (int H : {64, 1024, 2056}) {
    const auto table = to_bf16(random_floats(size_t(V) * size_t(H), uint64_t(H) + 3, -3, 3));
    const size_t n = tokens.size() * size_t(H);
    auto x = poisoned_f32(n);
    simt::launch(dim3(unsigned(tokens.size())), dim3(128),
                 [&] { cuda::embed_rows_kernel(as_bf16(table.data()), H, tokens.data(), x.data()); });
    for (size_t t = 0; t < tokens.size(); ++t)
      for (int i = 0; i < H; ++i)
        ASSERT_EQ(x[t * size_t(H) + size_t(i)], bf16_to_f32(table[size_t(tokens[t]) * size_t(H) + size_t(i)]))
            << "H " << H << " token " << t << " element " << i;
    EXPECT_TRUE(guard_intact(x, n)) << "H " << H;
  }
}

// The host's two-term split of v, as the kernels compute it: hi = bf16(v), lo = bf16(v - hi).
void host_split(float v, uint16_t& hi, uint16_t& lo) {
  hi = f32_to_bf16(v);
  lo = f32_to_bf16(v - bf16_to_f32(hi));
}

// A kernel's bf16 split of `src` (n values): hi and (unless lo is not written) lo bit-exact with the
// host split, the guard tails intact (lo untouched when not written), and hi + lo within
// kSplitTolerance of `ref`.
void expect_split(const std::vector<uint16_t>& hi, const std::vector<uint16_t>& lo, const std::vector<float>& src,
                  const std::vector<float>& ref, size_t n, bool with_lo, const std::string& what) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h, l;
    host_split(src[i], h, l);
    ASSERT_EQ(hi[i], h) << what << " element " << i;
    if (with_lo) {
      ASSERT_EQ(lo[i], l) << what << " element " << i;
    }
  }
  EXPECT_TRUE(guard_intact(hi, n)) << what;
  EXPECT_TRUE(guard_intact(lo, with_lo ? n : 0)) << what << ": lo written";
  if (with_lo) {
    std::vector<float> sum(n);
    for (size_t i = 0; i < n; ++i) sum[i] = bf16_to_f32(hi[i]) + bf16_to_f32(lo[i]);
    EXPECT_LE(rel_error(sum, ref), kSplitTolerance) << what;
  }
}

// split_bf16_kernel: <<<elementwise_blocks(n, 256), 256>>>; hi and lo bit-exact with the host split
// (special values included: +-0, +-inf, NaN, subnormals, rounding ties), with lo = null (hi alone,
// the same), and over a 2-block grid so the grid-stride loop runs several steps.
TEST(SimtKernels, SplitBf16) {
  for (size_t n : {size_t(1), size_t(255), size_t(256), size_t(3001)}) {
    auto x = random_floats(n, n + 1, -100, 100);
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -3e-39f, 1.00390625f /* a bf16 tie */,
                             1.01171875f, 3.4e38f, -1.0f / 3.0f};
    for (size_t i = 0; i < n && i < std::size(special); ++i) x[(i * 97) % n] = special[i];
    std::vector<uint16_t> want_hi(n), want_lo(n);
    for (size_t i = 0; i < n; ++i) host_split(x[i], want_hi[i], want_lo[i]);
    for (int grid : {elementwise_blocks(n, 256), 2}) {
      for (bool with_lo : {true, false}) {
        auto hi = poisoned_bf16(n), lo = poisoned_bf16(n);
        simt::launch(dim3(unsigned(grid)), dim3(256), [&] {
          cuda::split_bf16_kernel(x.data(), n, as_bf16(hi.data()), with_lo ? as_bf16(lo.data()) : nullptr);
        });
        const std::string what = "n " + std::to_string(n) + " grid " + std::to_string(grid) + (with_lo ? "" : " lo null");
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(hi[i], want_hi[i]) << what << " element " << i << " x " << x[i];
          if (with_lo) {
            ASSERT_EQ(lo[i], want_lo[i]) << what << " element " << i << " x " << x[i];
          }
        }
        EXPECT_TRUE(guard_intact(hi, n)) << what;
        EXPECT_TRUE(guard_intact(lo, with_lo ? n : 0)) << what << ": lo written";
        if (with_lo) {
          std::vector<float> sum, ref;  // the split's accuracy, over the finite values
          for (size_t i = 0; i < n; ++i)
            if (std::isfinite(x[i]) && std::abs(x[i]) < 1e38f) {
              sum.push_back(bf16_to_f32(hi[i]) + bf16_to_f32(lo[i]));
              ref.push_back(x[i]);
            }
          EXPECT_LE(rel_error(sum, ref), kSplitTolerance) << what;
        }
      }
    }
  }
}

// swiglu_split_kernel: <<<elementwise_blocks(T * I, 256), 256>>> over interleaved gate/up pairs:
// hi/lo bit-exact with the host split of cpu::silu(gate) * up (the same expression), and hi + lo
// within the split tolerance of it; lo = null writes hi alone.
TEST(SimtKernels, SwigluSplit) {
  for (auto [T, I] : {std::pair{1, 8}, std::pair{3, 1000}, std::pair{2, 3072}}) {
    const size_t n = size_t(T) * size_t(I);
    const auto gu = random_floats(2 * n, n + 7, -6, 6);
    std::vector<float> ref(n);
    for (size_t i = 0; i < n; ++i) ref[i] = cpu::silu(gu[2 * i]) * gu[2 * i + 1];
    for (bool with_lo : {true, false}) {
      auto hi = poisoned_bf16(n), lo = poisoned_bf16(n);
      simt::launch(dim3(unsigned(elementwise_blocks(n, 256))), dim3(256), [&] {
        cuda::swiglu_split_kernel(reinterpret_cast<const float2*>(gu.data()), n, as_bf16(hi.data()),
                                  with_lo ? as_bf16(lo.data()) : nullptr);
      });
      const std::string what = "T " + std::to_string(T) + " I " + std::to_string(I) + (with_lo ? "" : " lo null");
      expect_split(hi, lo, ref, ref, n, with_lo, what);
    }
  }
}

// count_tokens_kernel: <<<div_up(n, 256), 256>>>; counts[id] += occurrences, on top of what the
// counts held (the history is counted incrementally), ids at both ends of the vocabulary.
TEST(SimtKernels, CountTokens) {
  const int V = 500;
  for (int n : {1, 255, 256, 1000}) {
    std::mt19937 rng{uint32_t(n)};
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& id : ids) id = int32_t(rng() % 64 == 0 ? (rng() % 2 ? 0 : V - 1) : rng() % uint32_t(V));
    ids[0] = V - 1;
    std::vector<int32_t> counts(size_t(V) + kGuard, 0), want(counts.size(), 0);
    for (int i = 0; i < V; ++i) counts[size_t(i)] = want[size_t(i)] = int32_t(rng() % 3);
    for (size_t i = size_t(V); i < counts.size(); ++i) counts[i] = want[i] = -7;  // the guard
    for (int32_t id : ids) ++want[size_t(id)];
    simt::launch(dim3(unsigned(cuda::div_up(n, 256))), dim3(256),
                 [&] { cuda::count_tokens_kernel(ids.data(), n, counts.data()); });
    EXPECT_EQ(counts, want) << "n " << n;
  }
}

// ---------------------------------------------------------------------------------------------
// RMSNorm, QK-norm + RoPE

// rms_norm_kernel<F32> and <Split>: <<<rows, 256>>>. F32 against cpu::rms_norm (fp32 tolerance);
// Split: hi / lo bit-exact with the split of the F32 kernel's own output (same arithmetic), hi + lo
// against cpu::rms_norm (split tolerance), and lo = null writing hi alone. Widths: below a block
// (64), not a multiple of it (1000), 4 and 16 values per thread (1024; 4096, the kernel's maximum).
// The middle row is 1000x smaller (eps then matters), and each row is also checked on its own scale.
TEST(SimtKernels, RmsNormF32AndSplit) {
  constexpr auto F32 = cuda::NormOut::F32;
  constexpr auto Split = cuda::NormOut::Split;
  for (int n : {64, 1000, 1024, 4096}) {
    const int rows = 3;
    const size_t total = size_t(rows) * size_t(n);
    auto x = random_floats(total, 100 + uint64_t(n), -3, 3);
    for (int i = 0; i < n; ++i) x[size_t(n) + size_t(i)] *= 1e-3f;
    const auto w = random_floats(size_t(n), 200 + uint64_t(n), 0.5f, 1.5f);
    const float eps = 1e-6f;
    std::vector<float> ref(total);
    for (int r = 0; r < rows; ++r)
      cpu::rms_norm(&x[size_t(r) * size_t(n)], f32_vector(w), eps, n, &ref[size_t(r) * size_t(n)]);

    auto out = poisoned_f32(total);
    simt::launch(dim3(unsigned(rows)), dim3(cuda::kNormThreads),
                 [&] { cuda::rms_norm_kernel<F32>(x.data(), w.data(), n, eps, out.data(), nullptr, nullptr); });
    EXPECT_LE(rel_error(out, ref), kFp32Tolerance) << "n " << n;
    for (int r = 0; r < rows; ++r) {
      const size_t at = size_t(r) * size_t(n);
      EXPECT_LE(rel_error(std::span(out).subspan(at, size_t(n)), std::span(ref).subspan(at, size_t(n))), kFp32Tolerance)
          << "n " << n << " row " << r;
    }
    EXPECT_TRUE(guard_intact(out, total)) << "n " << n;

    for (bool with_lo : {true, false}) {
      auto hi = poisoned_bf16(total), lo = poisoned_bf16(total);
      simt::launch(dim3(unsigned(rows)), dim3(cuda::kNormThreads), [&] {
        cuda::rms_norm_kernel<Split>(x.data(), w.data(), n, eps, nullptr, as_bf16(hi.data()),
                                     with_lo ? as_bf16(lo.data()) : nullptr);
      });
      const std::string what = "split n " + std::to_string(n) + (with_lo ? "" : " lo null");
      expect_split(hi, lo, out, ref, total, with_lo, what);
    }
  }
}

// qk_norm_rope_kernel<D>: <<<(T, heads + kv_heads), 32>>>. q against cpu::rms_norm + cpu::rope (fp32
// tolerance); the k cache rows against bf16 of the CPU's value (one bf16 step); v rows bit-exact
// (bf16 of the input); every other cache element keeps its poison. Decode (the position read through
// pos_ptr, pos_base ignored; a long position: the fp32 angle and sincosf at large arguments) and
// prefill (pos_ptr null, T tokens from pos_base).
template <int D>
void check_qk_norm_rope(bool device_pos) {
  const int T = device_pos ? 1 : 3, heads = 4, kv_heads = 2;
  const int Q = heads * D, KV = kv_heads * D, p0 = device_pos ? 32767 : 1000, context = p0 + T + 5;
  const std::string what = "D " + std::to_string(D) + (device_pos ? " decode" : " prefill");
  const auto qkv = random_floats(size_t(T) * size_t(Q + 2 * KV), 11 + uint64_t(D) + uint64_t(device_pos), -2, 2);
  const auto qn = random_floats(size_t(D), 12, 0.5f, 1.5f), kn = random_floats(size_t(D), 13, 0.5f, 1.5f);
  const auto inv = cpu::rope_inv_freq(D, 1e6);
  const int32_t pos = p0;
  const float eps = 1e-6f;
  auto q = poisoned_f32(size_t(T) * size_t(Q));
  auto kc = poisoned_bf16(size_t(context) * size_t(KV)), vc = poisoned_bf16(size_t(context) * size_t(KV));
  simt::launch(dim3(unsigned(T), unsigned(heads + kv_heads)), dim3(32), [&] {
    cuda::qk_norm_rope_kernel<D>(qkv.data(), heads, kv_heads, false, D, qn.data(), kn.data(), inv.data(),
                                 device_pos ? &pos : nullptr, device_pos ? 12345 : p0, eps, q.data(),
                                 as_bf16(kc.data()), as_bf16(vc.data()));
  });
  std::vector<float> ref_q(size_t(T) * size_t(Q)), ref_k, got_k;
  std::vector<uint16_t> ref_v, got_v;
  for (int t = 0; t < T; ++t) {
    const float* row = &qkv[size_t(t) * size_t(Q + 2 * KV)];
    for (int h = 0; h < heads; ++h) {
      float* o = &ref_q[size_t(t * Q + h * D)];
      cpu::rms_norm(row + h * D, f32_vector(qn), eps, D, o);
      cpu::rope(o, D, p0 + t, inv.data());
    }
    for (int g = 0; g < kv_heads; ++g) {
      std::vector<float> k(static_cast<size_t>(D));
      cpu::rms_norm(row + Q + g * D, f32_vector(kn), eps, D, k.data());
      cpu::rope(k.data(), D, p0 + t, inv.data());
      for (int d = 0; d < D; ++d) {
        const size_t at = (size_t(p0 + t) * size_t(kv_heads) + size_t(g)) * size_t(D) + size_t(d);
        ref_k.push_back(bf16_to_f32(f32_to_bf16(k[size_t(d)])));
        got_k.push_back(bf16_to_f32(kc[at]));
        ref_v.push_back(f32_to_bf16(row[Q + KV + g * D + d]));
        got_v.push_back(vc[at]);
      }
    }
  }
  EXPECT_LE(rel_error(q, ref_q), kFp32Tolerance) << what;
  EXPECT_TRUE(guard_intact(q, ref_q.size())) << what;
  EXPECT_LE(rel_error(got_k, ref_k), kBf16Tolerance) << what;
  EXPECT_EQ(got_v, ref_v) << what;
  size_t written_k = 0, written_v = 0;
  for (size_t i = 0; i < kc.size(); ++i) {
    written_k += kc[i] != 0xffff;
    written_v += vc[i] != 0xffff;
  }
  EXPECT_EQ(written_k, size_t(T) * size_t(KV)) << what << ": k cache elements outside the tokens' rows written";
  EXPECT_EQ(written_v, size_t(T) * size_t(KV)) << what << ": v cache elements outside the tokens' rows written";
}

TEST(SimtKernels, QkNormRopeAppend) {
  for (bool device_pos : {true, false}) {
    check_qk_norm_rope<128>(device_pos);
    check_qk_norm_rope<64>(device_pos);
  }
}

// ---------------------------------------------------------------------------------------------
// GEMV

// gemv_bf16_kernel<Store / Add / SwiGLU>: <<<div_up(rows, 8), 128>>> (4 warps x 2 rows). Store against
// cpu::matmul over the same bf16 matrix (fp32 tolerance); Add (y += Wx on random y) against y + the
// CPU's dot (fp32 tolerance) and bit-exact with y + the Store kernel's output; SwiGLU (even rows)
// bit-exact with silu(store[2i]) * store[2i + 1]: the three epilogues share the accumulation (same
// fmaf order, same shuffle tree), so the epilogue is checked exactly and the accuracy once, on Store.
// (SwiGLU against the CPU's dots would measure conditioning, not the kernel: with rows 2, K 3072 the
// gate dot is 0.3164 out of sum |w x| = 783, and the fp32 noise of either side, ~6e-6 absolute, is
// 1.7e-5 relative in the only output.) Rows: one warp's pair, 13 (odd, not a multiple of a block's 8
// rows: the clamped second row of the last warp), 64, 258 (32 blocks + a pair). K: 8 and 64 (lanes
// without a group), 1000 (the tail loop only for some lanes), 1024 (exactly one unrolled step), 3072
// (three).
TEST(SimtKernels, GemvAllEpilogues) {
  using cuda::GemvEpilogue;
  constexpr int kRowsPerBlock = (cuda::kGemvThreads / 32) * cuda::kGemvRowsPerWarp;
  ThreadPool pool(1);
  for (int rows : {2, 13, 64, 258}) {
    for (int K : {8, 64, 1000, 1024, 3072}) {
      const std::string what = "rows " + std::to_string(rows) + " K " + std::to_string(K);
      const uint64_t seed = uint64_t(rows) * 7919 + uint64_t(K);
      const auto W = to_bf16(random_floats(size_t(rows) * size_t(K), seed));
      const auto x = random_floats(size_t(K), seed + 1);
      const auto y0 = random_floats(size_t(rows), seed + 2, -4, 4);
      std::vector<float> dot(static_cast<size_t>(rows));
      cpu::matmul(WeightMatrix{reinterpret_cast<const uint8_t*>(W.data()), DType::BF16, rows, K, nullptr}, x.data(), 1,
                  dot.data(), pool);
      const dim3 grid(unsigned(cuda::div_up(rows, kRowsPerBlock))), block(cuda::kGemvThreads);

      auto y = poisoned_f32(size_t(rows));
      simt::launch(grid, block, [&] { cuda::gemv_bf16_kernel<GemvEpilogue::Store>(as_bf16(W.data()), x.data(), rows, K, y.data()); });
      EXPECT_LE(rel_error(y, dot), kFp32Tolerance) << "store " << what;
      EXPECT_TRUE(guard_intact(y, size_t(rows))) << "store " << what;

      std::vector<float> ya = poisoned_f32(size_t(rows)), ref_add(static_cast<size_t>(rows));
      std::copy(y0.begin(), y0.end(), ya.begin());
      for (int r = 0; r < rows; ++r) ref_add[size_t(r)] = y0[size_t(r)] + dot[size_t(r)];
      simt::launch(grid, block, [&] { cuda::gemv_bf16_kernel<GemvEpilogue::Add>(as_bf16(W.data()), x.data(), rows, K, ya.data()); });
      EXPECT_LE(rel_error(ya, ref_add), kFp32Tolerance) << "add " << what;
      for (int r = 0; r < rows; ++r)
        ASSERT_EQ(ya[size_t(r)], y0[size_t(r)] + y[size_t(r)]) << "add " << what << " row " << r;
      EXPECT_TRUE(guard_intact(ya, size_t(rows))) << "add " << what;

      if (rows % 2 == 0) {
        auto ys = poisoned_f32(size_t(rows / 2));
        simt::launch(grid, block,
                     [&] { cuda::gemv_bf16_kernel<GemvEpilogue::SwiGLU>(as_bf16(W.data()), x.data(), rows, K, ys.data()); });
        for (int i = 0; i < rows / 2; ++i)
          ASSERT_EQ(ys[size_t(i)], cpu::silu(y[size_t(2 * i)]) * y[size_t(2 * i + 1)]) << "swiglu " << what << " output " << i;
        EXPECT_TRUE(guard_intact(ys, size_t(rows / 2))) << "swiglu " << what;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Decode attention

// attention_decode_kernel<128, G> <<<(kv_heads, splits), 128>>> then attention_decode_merge_kernel<128>
// <<<heads, 128>>>, as kernels.cu launches them, against cpu::causal_attention of the one query at
// position n - 1 over the bf16 cache values (attention tolerance). Cache rows at n and beyond are NaN
// (reading one would poison the output). Groups 1 and 2 (4 and 8 once); n = 1, 7 (inside one stream
// round), 300, 1000 (5000 once); splits 1, 4, 33 (64 once): n = 7 over 4 splits, 1000 over 33 and
// 5000 over 64 leave splits past the end (chunks are rounded up to 8), which must write an empty
// partial (m = -inf, l = 0, o = 0). Every partial slot is written (none keeps its NaN poison).
template <int G>
void check_decode_attention(int n, int splits, const simt::Options& options) {
  constexpr int D = 128;
  const int kv_heads = 2, heads = kv_heads * G, KV = kv_heads * D, capacity = n + 9;
  const std::string what = "G " + std::to_string(G) + " n " + std::to_string(n) + " splits " + std::to_string(splits);
  const auto q = random_floats(size_t(heads) * D, uint64_t(n) * 13 + G, -2, 2);
  const auto kf = random_floats(size_t(n) * size_t(KV), uint64_t(n) + 100, -2, 2);
  const auto vf = random_floats(size_t(n) * size_t(KV), uint64_t(n) + 101);
  std::vector<uint16_t> kc(size_t(capacity) * size_t(KV), 0xffff), vc = kc;
  for (size_t i = 0; i < kf.size(); ++i) kc[i] = f32_to_bf16(kf[i]), vc[i] = f32_to_bf16(vf[i]);
  const auto k_ref = from_bf16(std::span(kc).first(kf.size())), v_ref = from_bf16(std::span(vc).first(vf.size()));
  std::vector<float> ref(q.size());
  ThreadPool pool(1);
  const float scale = 1.0f / std::sqrt(float(D));
  cpu::causal_attention(q.data(), 1, heads, kv_heads, D, n - 1, k_ref.data(), v_ref.data(), scale, ref.data(), pool);

  const int32_t pos = n - 1;
  const float scale_log2 = scale * 1.4426950408889634f;
  const size_t slots = size_t(heads) * size_t(splits);
  auto po = poisoned_f32(slots * D), pml = poisoned_f32(slots * 2), out = poisoned_f32(q.size());
  simt::launch(dim3(unsigned(kv_heads), unsigned(splits)), dim3(cuda::kDecodeAttnThreads), [&] {
    cuda::attention_decode_kernel<D, G>(q.data(), as_bf16(kc.data()), as_bf16(vc.data()), &pos, kv_heads, splits,
                                        scale_log2, po.data(), pml.data());
  }, options);
  simt::launch(dim3(unsigned(heads)), dim3(D),
               [&] { cuda::attention_decode_merge_kernel<D>(po.data(), pml.data(), splits, out.data()); }, options);
  EXPECT_LE(rel_error(out, ref), kAttentionTolerance) << what;
  EXPECT_TRUE(guard_intact(out, q.size())) << what;
  EXPECT_TRUE(guard_intact(po, slots * D) && guard_intact(pml, slots * 2)) << what << ": partials written past the end";
  const int chunk = (cuda::div_up(n, splits) + 7) & ~7;
  for (size_t slot = 0; slot < slots; ++slot) {
    const int split = int(slot % size_t(splits));
    const bool empty = split * chunk >= n;
    const float m = pml[2 * slot], l = pml[2 * slot + 1];
    if (empty) {
      EXPECT_TRUE(m == -INFINITY && l == 0.0f) << what << ": empty split " << split << " m " << m << " l " << l;
    } else {
      EXPECT_TRUE(std::isfinite(m) && l >= 1.0f) << what << ": split " << split << " m " << m << " l " << l;
    }
    for (int d = 0; d < D; ++d) {
      const float o = po[slot * D + size_t(d)];
      ASSERT_TRUE(empty ? o == 0.0f : std::isfinite(o)) << what << ": partial o of split " << split << " dim " << d << " = " << o;
    }
  }
}

TEST(SimtKernels, DecodeAttentionSplitKv) {
  for (int n : {1, 7, 300, 1000}) {
    for (int splits : {1, 4, 33}) {
      if (n == 1000 && splits == 1) continue;  // the long single-split case is n = 300
      check_decode_attention<1>(n, splits, {});
      check_decode_attention<2>(n, splits, {});
    }
  }
  check_decode_attention<4>(300, 4, {});
  check_decode_attention<8>(1000, 33, {});
  check_decode_attention<2>(5000, 64, {});  // chunks of 80: split 62 holds the last 40, split 63 none
  // Results must not depend on the order threads resume after a synchronization point, nor on the
  // order of the blocks (the per-block statics standing in for shared memory then carry another
  // block's leftovers).
  simt::Options random = threads_in(Order::Random, 5);
  random.blocks = Order::Random;
  check_decode_attention<2>(300, 4, random);
  check_decode_attention<2>(300, 4, threads_in(Order::Reverse));
}

// ---------------------------------------------------------------------------------------------
// Sampling: the logit transform, argmax, filtered draws

cuda::LogitTransform transform_of(const SamplingParams& p, const int32_t* counts, bool gumbel, uint64_t step) {
  cuda::LogitTransform t;
  t.counts = counts;
  t.repetition_penalty = p.repetition_penalty;
  t.presence_penalty = p.presence_penalty;
  t.frequency_penalty = p.frequency_penalty;
  t.temperature = p.greedy() ? 1.0f : p.temperature;
  t.gumbel = gumbel;
  t.seed = p.seed;
  t.step = step;
  return t;
}

// transform_logits_kernel: <<<elementwise_blocks(V, 256), 256>>>. Without noise, bit-exact with the
// CPU Sampler's transformed logits (penalties from the counts of a history, temperature), NaN -> -inf,
// +-inf kept; with Gumbel noise, bit-exact with the host's l / T - log(-log(u)).
TEST(SimtKernels, TransformLogitsIsTheSamplersTransform) {
  const int V = 3000;
  auto logits = random_floats(size_t(V), 31, -6, 6);
  logits[5] = NAN;
  logits[6] = INFINITY;
  logits[7] = -INFINITY;
  logits[8] = 0.0f;
  logits[9] = -0.0f;
  std::vector<int32_t> history = {1, 1, 2, 3, 3, 3, 5, 6, 7, 8, 9, V - 1};
  for (int i = 0; i < 200; ++i) history.push_back(int32_t((i * 7919) % V));
  const auto counts = counts_of(history, V);
  struct Case {
    float temperature, repetition, presence, frequency;
  };
  int index = 0;
  for (const Case& c : {Case{1.0f, 1.0f, 0.0f, 0.0f}, Case{0.7f, 1.3f, 0.0f, 0.0f}, Case{1.3f, 0.8f, 0.5f, 0.2f},
                        Case{0.5f, 1.0f, -0.5f, 0.3f}, Case{2.0f, 1.5f, 1.0f, 1.0f}}) {
    SamplingParams p;
    p.temperature = c.temperature;
    p.repetition_penalty = c.repetition;
    p.presence_penalty = c.presence;
    p.frequency_penalty = c.frequency;
    p.seed = 77 + uint64_t(index);
    const auto want = sampler_transformed(logits, p, history);
    const std::string what = "case " + std::to_string(index++);
    for (bool gumbel : {false, true}) {
      const uint64_t step = 3;
      const auto t = transform_of(p, counts.data(), gumbel, step);
      auto dst = poisoned_f32(size_t(V));
      simt::launch(dim3(unsigned(elementwise_blocks(size_t(V), 256))), dim3(256),
                   [&] { cuda::transform_logits_kernel(logits.data(), V, t, dst.data()); });
      for (int i = 0; i < V; ++i) {
        const float w = gumbel ? test::gumbel_value(want[size_t(i)], p.seed, step, i) : want[size_t(i)];
        ASSERT_EQ(std::bit_cast<uint32_t>(dst[size_t(i)]), std::bit_cast<uint32_t>(w))
            << what << (gumbel ? " gumbel" : "") << " id " << i << ": " << dst[size_t(i)] << " vs " << w;
      }
      EXPECT_TRUE(guard_intact(dst, size_t(V))) << what;
    }
  }
}

// argmax_partial_kernel <<<blocks, 256>>> + argmax_final_kernel <<<1, 256>>>: the id of the largest
// transformed value, lowest id on ties. The partials and the result are poisoned before each launch.
struct Argmax {
  std::vector<uint64_t> partial;
  int32_t run(const std::vector<float>& logits, int blocks, const cuda::LogitTransform& t = {},
              const simt::Options& options = {}) {
    const int V = int(logits.size());
    partial.assign(size_t(blocks) + kGuard, ~0ull);
    std::vector<int32_t> out(1 + kGuard, -7);
    simt::launch(dim3(unsigned(blocks)), dim3(cuda::kArgmaxThreads),
                 [&] { cuda::argmax_partial_kernel(logits.data(), V, t, partial.data()); }, options);
    simt::launch(dim3(1), dim3(cuda::kArgmaxThreads),
                 [&] { cuda::argmax_final_kernel(partial.data(), blocks, out.data()); }, options);
    for (size_t i = size_t(blocks); i < partial.size(); ++i) EXPECT_EQ(partial[i], ~0ull) << "partial written past blocks";
    for (size_t i = 1; i < out.size(); ++i) EXPECT_EQ(out[i], -7) << "out written past its element";
    return out[0];
  }
};

// The winner planted at the first and last id of every block's slice and at both ends, for block
// counts below, at and above the launcher's (blocks > V: empty slices); V = 1, 31, 1000, 4097.
TEST(SimtKernels, ArgmaxWinnerInEveryBlockSliceAndAtTheEdges) {
  Argmax am;
  for (int V : {1, 31, 1000, 4097}) {
    const auto base = random_floats(size_t(V), uint64_t(V), -10, 10);
    std::vector<int> block_counts = {1, 3, 7, argmax_blocks(V)};
    if (V <= 31) block_counts.push_back(64);
    for (int blocks : block_counts) {
      const std::string what = "V " + std::to_string(V) + " blocks " + std::to_string(blocks);
      std::vector<float> l = base;
      EXPECT_EQ(am.run(l, blocks), lowest_argmax(base)) << what;
      const int slice = cuda::div_up(V, blocks);
      std::vector<int> spots = {0, V - 1};
      for (int b = 0; b < blocks && b * slice < V; ++b) {
        spots.push_back(b * slice);
        spots.push_back(std::min(V, (b + 1) * slice) - 1);
      }
      for (int at : spots) {
        l[size_t(at)] = 100.0f;
        ASSERT_EQ(am.run(l, blocks), at) << what << " winner at " << at;
        l[size_t(at)] = base[size_t(at)];
      }
    }
  }
}

// Ties go to the lowest id (in one slice, across a slice boundary, at the ends), in any thread order;
// NaN never wins over a number, +inf wins, all-NaN (all -inf after the transform) gives id 0.
TEST(SimtKernels, ArgmaxTiesPickTheLowestIdAndNanNeverWins) {
  Argmax am;
  const int V = 4097, blocks = argmax_blocks(V), slice = cuda::div_up(V, blocks);
  const auto base = random_floats(size_t(V), 42, -10, 10);
  const int best = lowest_argmax(base);
  for (auto [a, b] : {std::pair{5, 4000}, std::pair{slice - 1, slice}, std::pair{0, V - 1}, std::pair{100, 101}}) {
    for (Order order : {Order::Forward, Order::Reverse, Order::Random}) {
      std::vector<float> l = base;
      l[size_t(a)] = l[size_t(b)] = 50.0f;
      EXPECT_EQ(am.run(l, blocks, {}, threads_in(order, uint64_t(a))), a) << "tie " << a << "/" << b;
      std::fill(l.begin(), l.end(), -1.0f);  // -0 and +0 are equal: a tie as well
      l[size_t(a)] = -0.0f;
      l[size_t(b)] = 0.0f;
      EXPECT_EQ(am.run(l, blocks, {}, threads_in(order, uint64_t(b))), a) << "-0/+0 tie " << a << "/" << b;
    }
  }
  std::vector<float> l = base;
  l[size_t(best)] = NAN;
  std::vector<float> rest = base;
  rest[size_t(best)] = -INFINITY;
  EXPECT_EQ(am.run(l, blocks), lowest_argmax(rest)) << "NaN at the winner";
  l = base;
  l[3] = NAN;
  l[size_t(V - 2)] = INFINITY;
  l[size_t(V - 1)] = NAN;
  EXPECT_EQ(am.run(l, blocks), V - 2) << "+inf between NaNs";
  std::vector<float> none(size_t(V), NAN);
  EXPECT_EQ(am.run(none, blocks), 0) << "all NaN";
  none[7] = -INFINITY;
  EXPECT_EQ(am.run(none, 3), 0) << "NaN and -inf";
}

// Greedy with penalties picks the CPU Sampler's id (temperature 0); plain sampling (Gumbel-max) picks
// argmax(l / T + Gumbel(seed, step, id)) computed on the host from the Sampler's transformed logits.
TEST(SimtKernels, ArgmaxWithPenaltiesAndGumbelMatchesTheHost) {
  Argmax am;
  const int V = 3000;
  const auto logits = random_floats(size_t(V), 21, -4, 4);
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[size_t(a)] > logits[size_t(b)]; });
  // The history repeats the top ids so the penalties change the winner.
  const std::vector<int32_t> history = {order[0], order[0], order[1], order[2], order[2], order[2], 5, V - 1};
  const auto counts = counts_of(history, V);
  for (float rep : {1.0f, 1.5f, 0.7f})
    for (float presence : {0.0f, 1.0f})
      for (float frequency : {0.0f, 0.8f}) {
        const SamplingParams p = test::sampling_params(0.0f, 0, 1.0f, 0.0f, rep, presence, frequency, 0);  // greedy
        std::vector<float> l = logits;
        const int32_t want = Sampler(p).sample(l, history);
        EXPECT_EQ(am.run(logits, argmax_blocks(V), transform_of(p, counts.data(), false, 0)), want)
            << "repetition " << rep << " presence " << presence << " frequency " << frequency;
      }
  SamplingParams p;
  p.temperature = 0.8f;
  p.repetition_penalty = 1.2f;
  p.frequency_penalty = 0.4f;
  p.seed = 99;
  const auto t = sampler_transformed(logits, p, history);
  for (uint64_t step = 0; step < 6; ++step) {
    std::vector<float> g(static_cast<size_t>(V));
    for (int i = 0; i < V; ++i) g[size_t(i)] = test::gumbel_value(t[size_t(i)], p.seed, step, i);
    EXPECT_EQ(am.run(logits, step % 2 ? 7 : argmax_blocks(V), transform_of(p, counts.data(), true, step)), lowest_argmax(g))
        << "step " << step;
  }
}

// sample_filtered as kernels.cu launches it: transform_logits_kernel without noise into scratch, then
// sample_filtered_kernel <<<1, 1024>>> (top_k in 1..kSampleCandidates, below V) or
// sample_nucleus_kernel <<<1, 1024>>> (top_k off).
struct Filtered {
  simt::Options options;
  int32_t run(const std::vector<float>& logits, const SamplingParams& p, const int32_t* counts, uint64_t step) {
    const int V = int(logits.size());
    cuda::LogitTransform t = transform_of(p, counts, false, step);
    auto scratch = poisoned_f32(size_t(V));
    simt::launch(dim3(unsigned(elementwise_blocks(size_t(V), 256))), dim3(256),
                 [&] { cuda::transform_logits_kernel(logits.data(), V, t, scratch.data()); }, options);
    std::vector<int32_t> out(1 + kGuard, -7);
    if (p.top_k > 0 && p.top_k < V) {
      simt::launch(dim3(1), dim3(cuda::kSampleThreads), [&] {
        cuda::sample_filtered_kernel(scratch.data(), V, p.top_k, p.top_p, p.min_p, t.seed, t.step, out.data());
      }, options);
    } else {
      simt::launch(dim3(1), dim3(cuda::kNucleusThreads), [&] {
        cuda::sample_nucleus_kernel(scratch.data(), V, p.top_p, p.min_p, t.seed, t.step, out.data());
      }, options);
    }
    for (size_t i = 1; i < out.size(); ++i) EXPECT_EQ(out[i], -7) << "out written past its element";
    return out[0];
  }
};

// The draw the per-operator sampler must make, on the host, from the transformed values t. top_k on:
// the K = top_k candidates (value desc, id asc); fp64 exp(v - top) with the difference taken in
// double; normalized over the K; the top-p prefix and min-p floor; r = u * mass with u =
// uniform_at(seed, step, 0xffffffff); subtract until negative. top_k off: host_nucleus_draw. Also
// returns the kept candidates' probabilities (normalized over the kept mass), to compare with the
// Sampler's.
struct PerOpDraw {
  int32_t id = -1;
  std::vector<Sampler::Candidate> kept;
};
PerOpDraw per_op_filtered_draw(const std::vector<float>& t, const SamplingParams& p, uint64_t step) {
  const int V = int(t.size());
  if (!(p.top_k > 0 && p.top_k < V)) {
    const test::NucleusDraw n = test::host_nucleus_draw(t, p.top_p, p.min_p, p.seed, step);
    return {n.id, n.kept};
  }
  const int K = p.top_k;
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int32_t a, int32_t b) {
    return t[size_t(a)] > t[size_t(b)] || (t[size_t(a)] == t[size_t(b)] && a < b);
  });
  const float top = t[size_t(order[0])];
  std::vector<double> probs(static_cast<size_t>(K));
  for (int i = 0; i < K; ++i) probs[size_t(i)] = std::exp(double(t[size_t(order[size_t(i)])]) - double(top));
  double total = 0.0;
  for (double q : probs) total += q;
  const int keep = test::kept_after_cuts(probs, total, K, p.top_p, p.min_p);
  double mass = 0.0;
  for (int i = 0; i < keep; ++i) mass += probs[size_t(i)] / total;
  PerOpDraw h;
  for (int i = 0; i < keep; ++i) h.kept.push_back({order[size_t(i)], probs[size_t(i)] / total / mass});
  double r = cuda::uniform_at(p.seed, step, 0xffffffffu) * mass;
  h.id = order[size_t(keep - 1)];
  for (int i = 0; i < keep; ++i) {
    r -= probs[size_t(i)] / total;
    if (r < 0) {
      h.id = order[size_t(i)];
      break;
    }
  }
  return h;
}

// Every draw is the exact host draw, over top_k 1 (the argmax), small k, k = kSampleCandidates,
// top-p and min-p cuts, penalties, ties (logits on a 0.25 grid: lowest ids first), NaN logits (never
// drawn), and forward / reverse / random thread order (the gather's atomically claimed slots then
// differ; the sort must undo that). With top_k off (0, or k = V) the nucleus sampler runs: small and
// Qwen-sized vocabularies, flat distributions whose top-p set holds thousands of ids (at least
// `min_kept`: the old sampler could draw only from the top 1024), min-p alone, a tiny top-p (the
// argmax), ties (its n-th-equal-key search). The host's kept candidates are the Sampler's (ids in
// order; probabilities within 1e-6: fp32 exp here, fp64 there).
TEST(SimtKernels, SampleFilteredIsTheExactHostDraw) {
  struct Case {
    int V;
    float temperature;
    int top_k;
    float top_p, min_p, repetition, presence, frequency;
    bool ties, nan;
    int steps;
    size_t min_kept = 0;
  };
  const Case cases[] = {
      {40, 1.0f, 20, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, false, false, 4},
      {40, 0.7f, 0, 0.8f, 0.0f, 1.0f, 0.0f, 0.0f, false, false, 4},      // nucleus
      {40, 3.0f, 5, 0.7f, 0.0f, 1.0f, 0.0f, 0.0f, false, false, 8},      // flat: the top-p cut needs every p
      {1000, 1.0f, 1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, false, false, 2},    // the argmax
      {1000, 0.9f, 64, 0.95f, 0.05f, 1.3f, 0.5f, 0.2f, false, true, 3},
      {1000, 1.3f, 17, 0.9f, 0.1f, 1.0f, 0.0f, 0.0f, true, false, 3},
      {1000, 0.6f, 1000, 1.0f, 0.2f, 1.2f, 0.0f, 0.4f, false, false, 2}, // top_k = V: nucleus, min-p alone
      {3000, 1.0f, 1024, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, true, false, 2},  // K = kSampleCandidates
      {3000, 0.8f, 0, 0.9f, 0.0f, 1.1f, 0.3f, 0.0f, false, true, 2},     // nucleus with NaN and penalties
      {3000, 1.0f, 300, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, true, false, 2},
      {3000, 6.0f, 0, 0.95f, 0.0f, 1.0f, 0.0f, 0.0f, false, false, 3, 2000},  // flat: > 1024 kept
      {3000, 2.0f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, true, false, 6, 800},     // ties across the cut
      {3000, 1.0f, 0, 1e-6f, 0.0f, 1.0f, 0.0f, 0.0f, false, false, 2},        // tiny top-p: the argmax
      {151936, 1.5f, 0, 0.95f, 0.0f, 1.0f, 0.0f, 0.0f, false, false, 2, 20000},   // Qwen vocabulary
      {151936, 0.7f, 0, 0.9f, 0.02f, 1.2f, 0.0f, 0.0f, false, false, 2},          // both cuts
  };
  for (const Case& c : cases) {
    const size_t index = size_t(&c - cases);
    auto logits = random_floats(size_t(c.V), uint64_t(c.V) * 7 + uint64_t(c.top_k) + index, -8, 8);
    if (c.ties)
      for (float& x : logits) x = std::round(x * 4.0f) / 4.0f;
    if (c.nan) logits[size_t(lowest_argmax(logits))] = NAN, logits[3] = NAN;
    std::vector<int32_t> history = {0, 3, 3, 7, 11, 11, 11, c.V - 1};
    for (int j = 1; j <= 4; ++j) history.push_back(std::max(0, lowest_argmax(logits) - j));
    const auto counts = counts_of(history, c.V);
    SamplingParams p = test::sampling_params(c.temperature, c.top_k, c.top_p, c.min_p, c.repetition, c.presence,
                                                    c.frequency, 1234 + uint64_t(c.V));
    std::vector<Sampler::Candidate> dist;
    const auto t = sampler_transformed(logits, p, history, &dist);
    Filtered f;
    f.options = threads_in(index % 3 == 0 ? Order::Forward : index % 3 == 1 ? Order::Random : Order::Reverse, index);
    for (int step = 0; step < c.steps; ++step) {
      const std::string what = "case " + std::to_string(index) + " V " + std::to_string(c.V) + " top_k " +
                               std::to_string(c.top_k) + " step " + std::to_string(step);
      const PerOpDraw h = per_op_filtered_draw(t, p, uint64_t(step));
      if (step == 0) {
        test::expect_same_candidates(h.kept, dist, 1e-6, what + ": the kernel's arithmetic vs the Sampler's");
        EXPECT_GE(h.kept.size(), c.min_kept) << what;
      }
      const int32_t id = f.run(logits, p, counts.data(), uint64_t(step));
      EXPECT_EQ(id, h.id) << what;
      EXPECT_FALSE(id >= 0 && id < c.V && std::isnan(logits[size_t(id)])) << what << ": drew a NaN logit";
    }
  }
}

// Draw frequencies of the emulated kernels against Sampler::distribution, V = 40, 500 draws (steps)
// per case: top-k / top-p / min-p with penalties (sample_filtered_kernel: softmax over the top-k set),
// and top_k off with penalties (sample_nucleus_kernel with no cut: every id weighs in). Bound: a
// probability's standard error is sd = sqrt(p (1 - p) / draws) (<= 0.0224 at 500 draws); every id's
// frequency must be within 5 sd + 1e-3 of the Sampler's probability (a false failure has probability
// ~1e-6 per id), and ids the Sampler filters out are never drawn. Every draw is also the exact host
// draw: this checks the law that exact draw follows.
TEST(SimtKernels, SampleFilteredDrawsFollowTheSamplerDistribution) {
  const int V = 40, draws = 500;
  const auto logits = random_floats(size_t(V), 5, -2, 2);
  const std::vector<int32_t> history = {3, 3, 7, 11, 11, 11, 39};
  const auto counts = counts_of(history, V);
  struct Case {
    float temperature;
    int top_k;
    float top_p, min_p, repetition, presence, frequency;
  };
  for (const Case& c : {Case{0.6f, 20, 0.95f, 0.02f, 1.3f, 0.5f, 0.2f}, Case{0.8f, 0, 1.0f, 0.0f, 1.2f, 0.0f, 0.4f}}) {
    const SamplingParams p =
        test::sampling_params(c.temperature, c.top_k, c.top_p, c.min_p, c.repetition, c.presence, c.frequency, 1234);
    std::vector<Sampler::Candidate> dist;
    const auto t = sampler_transformed(logits, p, history, &dist);
    ASSERT_GE(dist.size(), size_t(5)) << "a distribution worth checking, top_k " << c.top_k;
    std::vector<double> freq(size_t(V), 0.0);
    int inexact = 0;
    Filtered f;
    for (int s = 0; s < draws; ++s) {
      const int32_t id = f.run(logits, p, counts.data(), uint64_t(s));
      ASSERT_GE(id, 0) << "step " << s;
      ASSERT_LT(id, V) << "step " << s;
      freq[size_t(id)] += 1.0 / draws;
      inexact += id != per_op_filtered_draw(t, p, uint64_t(s)).id;
    }
    EXPECT_EQ(inexact, 0) << "draws that differ from the exact host draw, top_k " << c.top_k;
    test::expect_frequencies_follow(freq, test::probabilities(dist, V), draws, "top_k " + std::to_string(c.top_k));
  }
}

// nucleus_draw alone (the block both decode paths run), its shared scratch in view: the draw is
// host_nucleus_draw's, and it reads the values twice (the weights, then one copy of the members of the
// top-p cut's bin and of the bins the draw's target can fall in) when they fit the member buffer.
// Qwen-sized vocabulary, Gaussian values (the synthetic models' logits have std ~2.5) without ties,
// at the temperatures and cuts that clients use. A smaller buffer costs reads, never the draw; with
// none, each search reads all V values four times (1 + 4 + 4).
struct NucleusBlock {
  cuda::NucleusShared s;
  cuda::NucleusMember members[3072];
};

struct NucleusRun {
  int32_t id = -1;
  int reads = -1;
};

NucleusRun run_nucleus_draw(const std::vector<float>& t, const cuda::NucleusRule& rule, int capacity,
                            const simt::Options& options) {
  const int V = int(t.size());
  int top_id = 0;
  for (int i = 1; i < V; ++i)
    if (t[size_t(i)] > t[size_t(top_id)]) top_id = i;
  NucleusRun r;
  simt::launch_shared<NucleusBlock>(dim3(1), dim3(512), [&](NucleusBlock& b) {
    const int id = cuda::nucleus_draw(t.data(), V, t[size_t(top_id)], top_id, rule, b.s, b.members, capacity);
    if (threadIdx.x == 0) r.id = id, r.reads = b.s.value_reads;
  }, options);
  return r;
}

TEST(SimtKernels, NucleusDrawReadsTheValuesTwice) {
  const int V = 151936;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::vector<float> logits(static_cast<size_t>(V));
  for (float& x : logits) x = normal(rng);
  struct Case {
    float temperature, top_p, min_p;
  };
  for (const Case& c : {Case{0.7f, 0.9f, 0.0f}, Case{0.6f, 0.95f, 0.0f}, Case{1.0f, 1.0f, 0.05f},
                        Case{0.7f, 0.95f, 0.02f}}) {
    std::vector<float> t(logits.size());
    for (size_t i = 0; i < t.size(); ++i) t[i] = logits[i] / c.temperature;
    // No two equal values (a drawn tie costs a read to find the n-th id): each one above the next
    // lower in sorted order.
    std::vector<int> order(t.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return t[size_t(a)] < t[size_t(b)]; });
    for (size_t k = 1; k < order.size(); ++k) {
      const float below = t[size_t(order[k - 1])];
      float& x = t[size_t(order[k])];
      if (x <= below) x = std::nextafter(below, INFINITY);
    }
    for (uint64_t step = 0; step < 6; ++step) {
      const std::string what = "T " + std::to_string(c.temperature) + " top_p " + std::to_string(c.top_p) +
                               " min_p " + std::to_string(c.min_p) + " step " + std::to_string(step);
      const cuda::NucleusRule rule{c.top_p, c.min_p, 99, step};
      const test::NucleusDraw h = test::host_nucleus_draw(t, c.top_p, c.min_p, rule.seed, step);
      const simt::Options order = threads_in(step % 2 ? Order::Random : Order::Reverse, step);
      const NucleusRun full = run_nucleus_draw(t, rule, 3072, order);
      EXPECT_EQ(full.id, h.id) << what;
      EXPECT_EQ(full.reads, 2) << what;
      if (step < 2) {
        const NucleusRun none = run_nucleus_draw(t, rule, 0, order);
        EXPECT_EQ(none.id, h.id) << what << ", no member buffer";
        EXPECT_EQ(none.reads, c.top_p < 1.0f ? 9 : 5) << what << ", no member buffer";
        const NucleusRun small = run_nucleus_draw(t, rule, 24, order);
        EXPECT_EQ(small.id, h.id) << what << ", a 24-member buffer";
        EXPECT_GE(small.reads, 2) << what << ", a 24-member buffer";
      }
    }
  }
}

}  // namespace
}  // namespace megaqwen

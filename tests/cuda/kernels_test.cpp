// Each CUDA kernel against the CPU reference on fresh random inputs, outputs poisoned with NaN first.
// Thresholds are per kernel (max|gpu - cpu| / max|cpu|), stated with the reason beside each.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "megaqwen/cuda/kernels.h"
#include "megaqwen/engine/cpu_ops.h"

namespace megaqwen {
namespace {

using namespace test;
using cuda::DeviceBuffer;

// fp32 on both sides, different summation order (tree vs sequential, fp32 vs fp64 sums): ~1e-7
// relative per op. 1e-5 is two orders above that and far below any indexing or formula mistake.
constexpr double kFp32Tolerance = 1e-5;
// The bf16 split hi + lo keeps ~16 significant bits: relative error <= 2^-16 ~ 1.5e-5 per element.
constexpr double kSplitTolerance = 4e-5;
// A bf16 output can differ from bf16(cpu value) by one rounding step when the fp32 values straddle a
// rounding boundary: 2^-8 relative at most.
constexpr double kBf16Tolerance = 1.0 / 256;

TEST(CudaKernels, RmsNormF32AndSplit) {
  MQ_REQUIRE_GPU();
  for (int n : {64, 128, 1000, 1024, 4096}) {
    const int rows = 3;
    const auto x = random_floats(size_t(rows * n), 100 + n, -3, 3);
    const auto w = random_floats(size_t(n), 200 + n, 0.5f, 1.5f);
    std::vector<float> ref(x.size());
    for (int r = 0; r < rows; ++r) cpu::rms_norm(&x[size_t(r * n)], f32_vector(w), 1e-6, n, &ref[size_t(r * n)]);

    auto dx = upload(x), dw = upload(w);
    auto out = poisoned_f32(x.size());
    cuda::rms_norm_f32(dx.data(), dw.data(), rows, n, 1e-6f, out.data(), nullptr);
    EXPECT_LE(rel_error(download(out), ref), kFp32Tolerance) << "n " << n;

    auto hi = poisoned_bf16(x.size()), lo = poisoned_bf16(x.size());
    cuda::rms_norm_split(dx.data(), dw.data(), rows, n, 1e-6f, hi.data(), lo.data(), nullptr);
    const auto h = from_bf16(download(hi)), l = from_bf16(download(lo));
    std::vector<float> sum(x.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = h[i] + l[i];
    EXPECT_LE(rel_error(sum, ref), kSplitTolerance) << "n " << n;
  }
}

TEST(CudaKernels, GemvAllEpilogues) {
  MQ_REQUIRE_GPU();
  for (int rows : {2, 8, 1030, 4096}) {
    for (int K : {8, 64, 1000, 1024, 3072}) {
      const uint64_t seed = uint64_t(rows) * 7919 + uint64_t(K);
      const auto wf = random_floats(size_t(rows) * size_t(K), seed);
      const auto w16 = to_bf16(wf);
      const auto wr = from_bf16(w16);  // the exact values the GPU multiplies
      const auto x = random_floats(size_t(K), seed + 1);
      const auto y0 = random_floats(size_t(rows), seed + 2);
      std::vector<float> dot(static_cast<size_t>(rows));
      for (int r = 0; r < rows; ++r) {
        double s = 0;
        for (int k = 0; k < K; ++k) s += double(wr[size_t(r) * size_t(K) + size_t(k)]) * double(x[size_t(k)]);
        dot[size_t(r)] = float(s);
      }
      auto dW = upload(w16);
      auto dx = upload(x);

      auto y = poisoned_f32(size_t(rows));
      cuda::gemv_bf16(dW.data(), dx.data(), rows, K, y.data(), cuda::GemvOut::Store, nullptr);
      const std::vector<float> sums = download(y);
      EXPECT_LE(rel_error(sums, dot), kFp32Tolerance) << "store rows " << rows << " K " << K;

      auto ya = upload(y0);
      cuda::gemv_bf16(dW.data(), dx.data(), rows, K, ya.data(), cuda::GemvOut::Add, nullptr);
      std::vector<float> ref_add(static_cast<size_t>(rows));
      for (int r = 0; r < rows; ++r) ref_add[size_t(r)] = y0[size_t(r)] + dot[size_t(r)];
      EXPECT_LE(rel_error(download(ya), ref_add), kFp32Tolerance) << "add rows " << rows << " K " << K;

      auto ys = poisoned_f32(size_t(rows / 2));
      cuda::gemv_bf16(dW.data(), dx.data(), rows, K, ys.data(), cuda::GemvOut::SwiGLU, nullptr);
      // The epilogue against the Store kernel's own sums (checked above): silu(g) * u of one pair can
      // be far smaller than its terms, so against the fp64 dots its relative error is not bounded by
      // the sums' (observed 2.1e-5 for the single pair of rows 2, K 3072, on the emulated device).
      std::vector<float> ref_swiglu(static_cast<size_t>(rows / 2));
      for (int i = 0; i < rows / 2; ++i) ref_swiglu[size_t(i)] = cpu::silu(sums[size_t(2 * i)]) * sums[size_t(2 * i + 1)];
      EXPECT_LE(rel_error(download(ys), ref_swiglu), kFp32Tolerance) << "swiglu rows " << rows << " K " << K;
    }
  }
}

// The RMSNorm fused into the GEMV (decode's qkv, gate/up and LM-head projections) against RMSNorm then
// GEMV in fp64, each epilogue, x far from unit scale so a missing or misplaced scale shows; the
// SwiGLU epilogue against the Store kernel's normed sums, as above.
TEST(CudaKernels, GemvNormedEqualsRmsNormThenGemv) {
  MQ_REQUIRE_GPU();
  const double eps = 1e-6;
  for (int rows : {2, 1030}) {
    for (int K : {8, 1000, 1024, 3072}) {
      const uint64_t seed = uint64_t(rows) * 31 + uint64_t(K);
      const auto w16 = to_bf16(random_floats(size_t(rows) * size_t(K), seed));
      const auto wr = from_bf16(w16);
      const auto x = random_floats(size_t(K), seed + 1, -20, 20);
      const auto nw = random_floats(size_t(K), seed + 2, 0.5f, 1.5f);
      const auto y0 = random_floats(size_t(rows), seed + 3);
      double ss = 0;
      for (float v : x) ss += double(v) * double(v);
      const double scale = 1.0 / std::sqrt(ss / K + eps);
      std::vector<float> dot(static_cast<size_t>(rows));
      for (int r = 0; r < rows; ++r) {
        double s = 0;
        for (int k = 0; k < K; ++k)
          s += double(wr[size_t(r) * size_t(K) + size_t(k)]) * double(nw[size_t(k)]) * double(x[size_t(k)]) * scale;
        dot[size_t(r)] = float(s);
      }
      auto dW = upload(w16);
      auto dx = upload(x), dnw = upload(nw);
      auto y = poisoned_f32(size_t(rows));
      cuda::gemv_bf16_normed(dW.data(), dx.data(), dnw.data(), float(eps), rows, K, y.data(), cuda::GemvOut::Store,
                             nullptr);
      const std::vector<float> sums = download(y);
      EXPECT_LE(rel_error(sums, dot), kFp32Tolerance) << "store rows " << rows << " K " << K;
      auto ya = upload(y0);
      cuda::gemv_bf16_normed(dW.data(), dx.data(), dnw.data(), float(eps), rows, K, ya.data(), cuda::GemvOut::Add,
                             nullptr);
      std::vector<float> ref_add(static_cast<size_t>(rows));
      for (int r = 0; r < rows; ++r) ref_add[size_t(r)] = y0[size_t(r)] + dot[size_t(r)];
      EXPECT_LE(rel_error(download(ya), ref_add), kFp32Tolerance) << "add rows " << rows << " K " << K;
      auto ys = poisoned_f32(size_t(rows / 2));
      cuda::gemv_bf16_normed(dW.data(), dx.data(), dnw.data(), float(eps), rows, K, ys.data(), cuda::GemvOut::SwiGLU,
                             nullptr);
      std::vector<float> ref_swiglu(static_cast<size_t>(rows / 2));
      for (int i = 0; i < rows / 2; ++i) ref_swiglu[size_t(i)] = cpu::silu(sums[size_t(2 * i)]) * sums[size_t(2 * i + 1)];
      EXPECT_LE(rel_error(download(ys), ref_swiglu), kFp32Tolerance) << "swiglu rows " << rows << " K " << K;
    }
  }
}

TEST(CudaKernels, SwigluSplit) {
  MQ_REQUIRE_GPU();
  const int T = 5, I = 3072;
  const auto gu = random_floats(size_t(T) * 2 * I, 7, -4, 4);
  std::vector<float> ref(static_cast<size_t>(T) * I);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = cpu::silu(gu[2 * i]) * gu[2 * i + 1];
  auto dgu = upload(gu);
  auto hi = poisoned_bf16(ref.size()), lo = poisoned_bf16(ref.size());
  cuda::swiglu_split(dgu.data(), T, I, hi.data(), lo.data(), nullptr);
  const auto h = from_bf16(download(hi)), l = from_bf16(download(lo));
  std::vector<float> sum(ref.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = h[i] + l[i];
  EXPECT_LE(rel_error(sum, ref), kSplitTolerance);
}

TEST(CudaKernels, EmbedRows) {
  MQ_REQUIRE_GPU();
  const int V = 1000, H = 1024;
  const auto table = to_bf16(random_floats(size_t(V) * H, 3));
  const std::vector<int32_t> tokens = {0, 999, 17, 17, 512};
  auto dt = upload(table);
  auto dtok = upload(tokens);
  auto x = poisoned_f32(tokens.size() * H);
  cuda::embed_rows(dt.data(), H, dtok.data(), int(tokens.size()), x.data(), nullptr);
  const auto got = download(x);
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int i = 0; i < H; ++i)
      ASSERT_EQ(got[t * H + size_t(i)], bf16_to_f32(table[size_t(tokens[t]) * H + size_t(i)])) << t << " " << i;
}

// QK-norm + RoPE + append: q against cpu::rms_norm + cpu::rope in fp32; the cache rows against
// bf16(cpu value); every other cache row must keep its poison. Qwen3's layout (q | k | v, RoPE over
// the whole head) and Qwen3.5's (q | gate | k | v, RoPE over the first rotary_dim dims: a quarter of
// the head, and 16 of 64, whose pairs (i, i + 8) sit in different lanes).
TEST(CudaKernels, QkNormRopeAppend) {
  MQ_REQUIRE_GPU();
  struct Case {
    int D, rotary_dim;
    bool gated;
  };
  for (const Case& cs : {Case{64, 64, false}, Case{128, 128, false}, Case{256, 256, false}, Case{256, 64, true},
                         Case{64, 16, true}, Case{128, 32, false}}) {
    for (bool device_pos : {false, true}) {
      const int D = cs.D, R = cs.rotary_dim;
      const int T = device_pos ? 1 : 5, heads = 4, kv_heads = 2, context = 40000;
      const int Q = heads * D, KV = kv_heads * D, p0 = device_pos ? 32767 : 1000;
      const int k_off = cs.gated ? 2 * Q : Q, row_len = k_off + 2 * KV;
      const auto qkv = random_floats(size_t(T) * row_len, 11 + uint64_t(D + R), -2, 2);
      const auto qn = random_floats(size_t(D), 12, 0.5f, 1.5f), kn = random_floats(size_t(D), 13, 0.5f, 1.5f);
      const auto inv = cpu::rope_inv_freq(R, 1e6);
      auto dqkv = upload(qkv), dqn = upload(qn), dkn = upload(kn), dinv = upload(inv);
      const std::vector<int32_t> pos_host = {p0};
      auto dpos = upload(pos_host);
      auto q = poisoned_f32(size_t(T) * Q);
      auto kc = poisoned_bf16(size_t(context) * KV), vc = poisoned_bf16(size_t(context) * KV);
      cuda::qk_norm_rope({dqkv.data(), T, heads, kv_heads, D, R, cs.gated, dqn.data(), dkn.data(), dinv.data(),
                          device_pos ? dpos.data() : nullptr, device_pos ? 0 : p0, 1e-6f, q.data(), kc.data(), vc.data()},
                         nullptr);
      const auto gq = download(q);
      const auto gk = from_bf16(download(kc)), gv = from_bf16(download(vc));
      std::vector<float> ref_q(static_cast<size_t>(T) * Q), ref_k, got_k, ref_v, got_v;
      for (int t = 0; t < T; ++t) {
        const float* row = &qkv[size_t(t) * row_len];
        for (int h = 0; h < heads; ++h) {
          float* o = &ref_q[size_t(t * Q + h * D)];
          cpu::rms_norm(row + h * D, f32_vector(qn), 1e-6, D, o);
          cpu::rope(o, R, p0 + t, inv.data());
        }
        for (int g = 0; g < kv_heads; ++g) {
          std::vector<float> k(static_cast<size_t>(D));
          cpu::rms_norm(row + k_off + g * D, f32_vector(kn), 1e-6, D, k.data());
          cpu::rope(k.data(), R, p0 + t, inv.data());
          for (int d = 0; d < D; ++d) {
            const size_t at = (size_t(p0 + t) * kv_heads + size_t(g)) * D + size_t(d);
            ref_k.push_back(bf16_to_f32(f32_to_bf16(k[size_t(d)])));
            got_k.push_back(gk[at]);
            ref_v.push_back(bf16_to_f32(f32_to_bf16(row[k_off + KV + g * D + d])));
            got_v.push_back(gv[at]);
          }
        }
      }
      const std::string what = "D " + std::to_string(D) + " rotary " + std::to_string(R) + " gated " +
                               std::to_string(cs.gated) + " device_pos " + std::to_string(device_pos);
      EXPECT_LE(rel_error(gq, ref_q), kFp32Tolerance) << what;
      EXPECT_LE(rel_error(got_k, ref_k), kBf16Tolerance) << what;
      EXPECT_EQ(got_v, ref_v) << what;
      size_t written_k = 0, written_v = 0;
      for (size_t i = 0; i < gk.size(); ++i) written_k += !std::isnan(gk[i]), written_v += !std::isnan(gv[i]);
      EXPECT_EQ(written_k, size_t(T) * KV) << "k cache rows outside the tokens' positions were written; " << what;
      EXPECT_EQ(written_v, size_t(T) * KV) << "v cache rows outside the tokens' positions were written; " << what;
    }
  }
}

// Qwen3.5's output gate, read in place from the projection rows (stride > n), against cpu::sigmoid.
TEST(CudaKernels, SigmoidGateInPlace) {
  MQ_REQUIRE_GPU();
  const int rows = 3, n = 520, stride = 1400;
  const auto x = random_floats(size_t(rows) * n, 31, -2, 2);
  const auto gate = random_floats(size_t(rows) * stride, 32, -8, 8);
  std::vector<float> ref(x.size());
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < n; ++i)
      ref[size_t(r * n + i)] = x[size_t(r * n + i)] * cpu::sigmoid(gate[size_t(r * stride + i)]);
  auto dx = upload(x), dg = upload(gate);
  cuda::sigmoid_gate(dx.data(), dg.data(), rows, n, stride, nullptr);
  EXPECT_LE(rel_error(download(dx), ref), kFp32Tolerance);
  EXPECT_EQ(download(dg), gate) << "the gate rows were written";
}

// Causal attention in fp64 over the bf16 cache values: queries at p0..p0+T-1, keys 0..p0+T-1.
std::vector<float> reference_attention(const std::vector<float>& q, const std::vector<float>& k,
                                       const std::vector<float>& v, int T, int p0, int heads, int kv_heads, int D,
                                       int query_pos0) {
  std::vector<float> out(static_cast<size_t>(T) * heads * D);
  const int group = heads / kv_heads;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < heads; ++h) {
      const int g = h / group, n = query_pos0 + t + 1;
      std::vector<double> s(static_cast<size_t>(n));
      double mx = -INFINITY;
      for (int j = 0; j < n; ++j) {
        double d = 0;
        for (int i = 0; i < D; ++i)
          d += double(q[(size_t(t) * heads + h) * D + i]) * double(k[(size_t(j) * kv_heads + g) * D + i]);
        s[size_t(j)] = d / std::sqrt(double(D));
        mx = std::max(mx, s[size_t(j)]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int i = 0; i < D; ++i) {
        double o = 0;
        for (int j = 0; j < n; ++j) o += s[size_t(j)] * double(v[(size_t(j) * kv_heads + g) * D + i]);
        out[(size_t(t) * heads + h) * D + i] = float(o / sum);
      }
    }
  (void)p0;
  return out;
}

// Cache positions at and beyond the visible range are NaN: reading one would poison the output.
cuda::DeviceBuffer<uint16_t> cache_with_poison_tail(const std::vector<uint16_t>& rows, size_t capacity) {
  auto d = poisoned_bf16(capacity);
  CUDA_CHECK(cudaMemcpy(d.data(), rows.data(), rows.size() * 2, cudaMemcpyHostToDevice));
  return d;
}

// fp32 arithmetic with exp2f and a different summation order than the fp64 reference: ~1e-6.
constexpr double kAttentionTolerance = 2e-5;

// The tensor-core kernel rounds q (after its scale) and the softmax weights to bf16: 2^-9 relative
// each, which moves the output by ~1e-3 relative (measured below); a wrong mask, tile offset or
// rescale moves it by 1e-1 or more.
constexpr double kTcAttentionTolerance = 1e-2;

// Both prefill kernels (fp32 CUDA cores; bf16 tensor cores) against fp64 attention over the same bf16
// cache, outputs poisoned past the T rows (a write beyond them shows).
TEST(CudaKernels, PrefillAttentionCausal) {
  MQ_REQUIRE_GPU();
  struct Case {
    int T, p0, heads, kv_heads, D;
  };
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  for (const Case& c : {Case{1, 0, 2, 1, 128}, Case{37, 0, 4, 2, 128}, Case{64, 5, 4, 2, 128}, Case{130, 200, 4, 1, 128},
                        Case{70, 63, 8, 2, 64}, Case{200, 0, 16, 8, 128}, Case{70, 60, 8, 2, 256}}) {
    const int n = c.p0 + c.T, KV = c.kv_heads * c.D, capacity = n + 80;
    const auto q = random_floats(size_t(c.T) * c.heads * c.D, uint64_t(c.T * 31 + c.p0), -2, 2);
    const auto k16 = to_bf16(random_floats(size_t(n) * KV, uint64_t(c.T) + 5, -2, 2));
    const auto v16 = to_bf16(random_floats(size_t(n) * KV, uint64_t(c.T) + 6));
    const auto ref = reference_attention(q, from_bf16(k16), from_bf16(v16), c.T, c.p0, c.heads, c.kv_heads, c.D, c.p0);
    auto dq = upload(q);
    auto kc = cache_with_poison_tail(k16, size_t(capacity) * KV), vc = cache_with_poison_tail(v16, size_t(capacity) * KV);
    for (bool tc : {false, true}) {
      const size_t smem = tc ? cuda::attention_prefill_tc_smem_bytes(c.D) : cuda::attention_prefill_smem_bytes(c.D);
      if (smem > prop.sharedMemPerBlockOptin) {
        std::printf("skipping D %d (tensor cores %d): %zu bytes of shared memory, this GPU allows %zu\n", c.D, tc, smem,
                    size_t(prop.sharedMemPerBlockOptin));
        continue;
      }
      auto out = poisoned_f32(q.size() + size_t(c.heads * c.D));
      const cuda::PrefillAttentionArgs args{dq.data(), kc.data(),  vc.data(), c.T, c.p0, c.heads, c.kv_heads, c.D,
                                            1.0f / std::sqrt(float(c.D)), out.data()};
      tc ? cuda::attention_prefill_tc(args, nullptr) : cuda::attention_prefill(args, nullptr);
      auto got = download(out);
      const std::string what = "T " + std::to_string(c.T) + " p0 " + std::to_string(c.p0) + " D " +
                               std::to_string(c.D) + (tc ? " tensor cores" : " fp32");
      EXPECT_TRUE(guard_tail_intact(got, q.size())) << what << ": wrote past the T rows";
      got.resize(q.size());
      const double err = rel_error(got, ref);
      EXPECT_LE(err, tc ? kTcAttentionTolerance : kAttentionTolerance) << what;
      RecordProperty(what, std::to_string(err));
    }
  }
}

TEST(CudaKernels, DecodeAttentionSplitKv) {
  MQ_REQUIRE_GPU();
  struct Shape {
    int D, G;
  };
  std::vector<Shape> shapes;
  for (int G : {1, 2, 4, 8}) shapes.push_back({128, G});
  for (int G : {1, 4}) shapes.push_back({256, G});  // Qwen3.5: head_dim 256, 4 query heads per kv head
  for (const auto& [D, G] : shapes) {
    ASSERT_TRUE(cuda::supported_group(D, G));
    for (int n : {1, 7, 100, 1000, 5000}) {
      for (int splits : {1, 3, 33, 64}) {
        const int kv_heads = 2, heads = kv_heads * G, KV = kv_heads * D;
        const auto q = random_floats(size_t(heads) * D, uint64_t(n * 13 + G), -2, 2);
        const auto k16 = to_bf16(random_floats(size_t(n) * KV, uint64_t(n) + 100, -2, 2));
        const auto v16 = to_bf16(random_floats(size_t(n) * KV, uint64_t(n) + 101));
        const auto ref = reference_attention(q, from_bf16(k16), from_bf16(v16), 1, 0, heads, kv_heads, D, n - 1);
        auto dq = upload(q);
        auto kc = cache_with_poison_tail(k16, size_t(n + 64) * KV), vc = cache_with_poison_tail(v16, size_t(n + 64) * KV);
        const std::vector<int32_t> pos = {n - 1};
        auto dpos = upload(pos);
        auto po = poisoned_f32(size_t(heads) * splits * D), pml = poisoned_f32(size_t(heads) * splits * 2);
        auto out = poisoned_f32(q.size());
        cuda::attention_decode({dq.data(), kc.data(), vc.data(), dpos.data(), heads, kv_heads, D, splits,
                                1.0f / std::sqrt(float(D)), po.data(), pml.data(), out.data()},
                               nullptr);
        EXPECT_LE(rel_error(download(out), ref), kAttentionTolerance)
            << "D " << D << " G " << G << " n " << n << " splits " << splits;
      }
    }
  }
}

// Noise for deep benchmark caches: the same for a seed, another for another seed, and uniform on
// [-1, 1] (mean 0 and variance 1/3 within 5 standard errors over 99,999 values, every tenth of the
// range visited), so a kernel writing zeros or a constant cannot pass.
TEST(CudaKernels, FillNoiseIsDeterministicAndInRange) {
  MQ_REQUIRE_GPU();
  const size_t n = 99999;
  auto a = poisoned_bf16(n + 1), b = poisoned_bf16(n + 1), c = poisoned_bf16(n + 1);
  cuda::fill_noise_bf16(a.data(), n, 5, nullptr);
  cuda::fill_noise_bf16(b.data(), n, 5, nullptr);
  cuda::fill_noise_bf16(c.data(), n, 6, nullptr);
  const auto fa = from_bf16(download(a)), fb = from_bf16(download(b)), fc = from_bf16(download(c));
  double sum = 0, sum_sq = 0;
  size_t differ = 0;
  std::vector<int> tenths(20, 0);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(fa[i], fb[i]) << "index " << i;
    ASSERT_TRUE(fa[i] >= -1.0f && fa[i] <= 1.0f) << fa[i];
    differ += fa[i] != fc[i];
    sum += fa[i];
    sum_sq += double(fa[i]) * fa[i];
    ++tenths[size_t(std::clamp(int((fa[i] + 1.0f) * 10.0f), 0, 19))];
  }
  EXPECT_GT(differ, n * 9 / 10) << "seeds 5 and 6 give nearly the same noise";
  const double mean = sum / double(n), variance = sum_sq / double(n) - mean * mean;
  EXPECT_NEAR(mean, 0.0, 5 * std::sqrt(1.0 / 3.0 / double(n)));
  EXPECT_NEAR(variance, 1.0 / 3.0, 5 * std::sqrt(4.0 / 45.0 / double(n)));  // var of u^2 for u ~ U(-1, 1)
  for (size_t t = 0; t < tenths.size(); ++t) EXPECT_GT(tenths[t], 0) << "no value in tenth " << t;
  EXPECT_TRUE(std::isnan(fa[n])) << "wrote past n";
}

}  // namespace
}  // namespace megaqwen

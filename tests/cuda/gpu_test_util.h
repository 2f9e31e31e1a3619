// Helpers shared by the GPU tests: skipping without a device, poisoned device buffers, random data,
// and the error metric (max|a - b| / max|b|, b the CPU reference).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "megaqwen/cuda/cublas_gemm.h"
#include "megaqwen/cuda/cuda_check.h"
#include "megaqwen/cuda/device_buffer.h"
#include "megaqwen/engine/engine.h"
#include "megaqwen/engine/verify.h"
#include "megaqwen/model/qwen3_weights.h"
#include "megaqwen/util/bf16.h"
#include "test_random.h"  // random_floats

namespace megaqwen::test {

// Skips the current test unless a usable CUDA device is present. Use as the first statement.
#define MQ_REQUIRE_GPU()                                                          \
  do {                                                                            \
    std::string mq_why_;                                                          \
    if (!::megaqwen::cuda::device_usable(&mq_why_)) GTEST_SKIP() << "no usable GPU: " << mq_why_; \
  } while (0)

// Whether this build runs on the emulated device (tests/simt: test_cuda_emulated, MEGAQWEN_SIMT),
// where a kernel costs ~10^4 times its GPU time: tests shrink their sweeps there (same assertions,
// fewer sizes) or skip with MQ_SKIP_IF_EMULATED when even the smallest run would take minutes.
#if defined(MEGAQWEN_SIMT)
constexpr bool kEmulatedDevice = true;
#else
constexpr bool kEmulatedDevice = false;
#endif
#define MQ_SKIP_IF_EMULATED(why)                                                    \
  do {                                                                              \
    if (::megaqwen::test::kEmulatedDevice) GTEST_SKIP() << "emulated device: " << why; \
  } while (0)

// Ids at the edges of every slice when V ids are split into `slices` contiguous slices of
// ceil(V / slices) (the argmax / selection / logprob reductions' splits), plus 0 and V - 1. On the
// emulated device only the first two, a middle and the last two slices.
inline std::vector<int> slice_edge_ids(int V, int slices) {
  const int per = (V + slices - 1) / slices;
  std::vector<int> spots = {0, V - 1};
  for (int b = 0; b < slices && b * per < V; ++b) {
    if (kEmulatedDevice && b > 1 && b != slices / 2 && b < slices - 2) continue;
    spots.push_back(b * per);
    spots.push_back(std::min(V, (b + 1) * per) - 1);
  }
  return spots;
}

// Logit rows [n, V] against reference rows, judged as `megaqwen verify` judges a phase (engine/verify.h):
// a top-1 flip is a near-tie, not a mismatch, when the reference's logits of the two ids differ by at
// most twice the rows' median max|got - want|. Its mismatches name the flips of a clear winner.
inline PhaseResult judge_rows(const char* name, std::span<const float> got, std::span<const float> want, size_t V) {
  std::vector<LogitComparison> compared;
  for (size_t p = 0; p * V < want.size(); ++p) compared.push_back(compare_logits(want.subspan(p * V, V), got.subspan(p * V, V)));
  return judge_phase(name, compared, 0);
}
inline std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += "\n  " + l;
  return s;
}

// The token an engine draws on its device (Engine::sample_on_device without logprobs), if it does.
inline std::optional<int32_t> device_token(Engine& engine, const SamplingParams& params,
                                           std::span<const int32_t> history) {
  const std::optional<DeviceDraw> d = engine.sample_on_device(params, history, kNoLogprobs);
  return d ? std::optional<int32_t>(d->token) : std::nullopt;
}

// As MQ_REQUIRE_GPU, and cuBLAS must be loadable (a failure on a GPU machine, not a skip).
#define MQ_REQUIRE_GPU_AND_CUBLAS()                                              \
  do {                                                                           \
    MQ_REQUIRE_GPU();                                                            \
    std::string mq_why2_;                                                        \
    ASSERT_TRUE(::megaqwen::cuda::cublas_loadable(&mq_why2_)) << mq_why2_;       \
  } while (0)


// A host fp32 vector seen as a stored F32 weight vector (the CPU reference's norm weights and the like).
inline WeightVector f32_vector(const std::vector<float>& w) {
  return WeightVector{reinterpret_cast<const uint8_t*>(w.data()), DType::F32, int64_t(w.size())};
}

inline std::vector<uint16_t> to_bf16(std::span<const float> v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}
inline std::vector<float> from_bf16(std::span<const uint16_t> v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(v[i]);
  return out;
}

template <typename T>
cuda::DeviceBuffer<T> upload(std::span<const T> host) {
  cuda::DeviceBuffer<T> d(host.size());
  CUDA_CHECK(cudaMemcpy(d.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <typename T>
cuda::DeviceBuffer<T> upload(const std::vector<T>& host) {
  return upload(std::span<const T>(host));
}
template <typename T>
std::vector<T> download(const cuda::DeviceBuffer<T>& d, size_t n = SIZE_MAX) {
  std::vector<T> host(std::min(n, d.size()));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(host.data(), d.data(), host.size() * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

// Output buffers are filled with NaN before each run, so an element the kernel forgot stays NaN.
inline cuda::DeviceBuffer<float> poisoned_f32(size_t n) {
  cuda::DeviceBuffer<float> d(n);
  CUDA_CHECK(cudaMemset(d.data(), 0xff, d.bytes()));  // 0xffffffff is a NaN
  // The memset runs on the legacy stream, which the engines' non-blocking streams do not wait for.
  CUDA_CHECK(cudaDeviceSynchronize());
  return d;
}
inline cuda::DeviceBuffer<uint16_t> poisoned_bf16(size_t n) {
  cuda::DeviceBuffer<uint16_t> d(n);
  CUDA_CHECK(cudaMemset(d.data(), 0xff, d.bytes()));  // 0xffff is a bf16 NaN
  CUDA_CHECK(cudaDeviceSynchronize());  // as above
  return d;
}

// Every element of `got` from `from` on is still the NaN poison (nothing was written past the output).
inline bool guard_tail_intact(const std::vector<float>& got, size_t from) {
  for (size_t i = from; i < got.size(); ++i)
    if (!std::isnan(got[i])) return false;
  return true;
}

// max|a - b| / max|b|; a non-finite a counts as infinite error.
inline double rel_error(std::span<const float> a, std::span<const float> b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::isfinite(a[i]) ? std::abs(double(a[i]) - double(b[i])) : INFINITY);
    ref = std::max(ref, std::abs(double(b[i])));
  }
  return ref > 0 ? diff / ref : diff;
}
inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  return rel_error(std::span<const float>(a), std::span<const float>(b));
}

}  // namespace megaqwen::test

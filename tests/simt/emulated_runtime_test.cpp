// The emulated CUDA runtime's own rules (emulated_runtime.cpp, emulated_cublas.cpp), so the GPU suite
// that runs on it (test_cuda_emulated) can trust them: stream work runs only when the host waits,
// pageable copies are staged at the call and pinned ones read when they run, copies and GEMM operands
// must stay inside their allocations, a captured graph keeps its kernels' arguments, waiting inside a
// capture fails, launches need a valid configuration, a faulting kernel poisons the context, and the
// concurrent mode's streams run while the host goes on.
#include <gtest/gtest.h>

#include <cublas_v2.h>

#include <cstdint>
#include <vector>

#include "megaqwen/cuda/launch.cuh"
#include "simt/emulated_runtime.h"

namespace {

using megaqwen::cuda::launch_kernel;

__global__ void write_value(int* out, int value) {
  if (threadIdx.x == 0) out[blockIdx.x] = value;
}
__global__ void uses_dynamic_shared(int* out) {
  int* s = simt::dynamic_shared<int>();
  if (threadIdx.x == 0) s[0] = 7;
  __syncthreads();
  if (threadIdx.x == 1) out[0] = s[0];
}
__global__ void traps() { __trap(); }

struct Device {
  int* d = nullptr;
  int* pinned = nullptr;
  cudaStream_t stream = nullptr;
  Device() {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 4 * sizeof(int)), cudaSuccess);
    EXPECT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), 4 * sizeof(int)), cudaSuccess);
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  }
  ~Device() {
    cudaStreamDestroy(stream);
    cudaFreeHost(pinned);
    cudaFree(d);
  }
};

TEST(EmulatedRuntime, StreamWorkRunsWhenTheHostWaits) {
  Device dev;
  EXPECT_EQ(dev.d[0], -1) << "fresh allocations hold 0xff bytes";
  dev.pinned[0] = 5;
  launch_kernel(write_value, 1, 32, 0, dev.stream, dev.d, 42);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(dev.pinned, dev.d, sizeof(int), cudaMemcpyDeviceToHost, dev.stream), cudaSuccess);
  EXPECT_EQ(dev.pinned[0], 5) << "a pinned destination is written when the copy runs, not at the call";
  ASSERT_EQ(cudaStreamSynchronize(dev.stream), cudaSuccess);
  EXPECT_EQ(dev.pinned[0], 42);
  // A pageable destination: the call returns once the copy (and the work before it) is done.
  launch_kernel(write_value, 1, 32, 0, dev.stream, dev.d, 43);
  int pageable = 0;
  ASSERT_EQ(cudaMemcpyAsync(&pageable, dev.d, sizeof(int), cudaMemcpyDeviceToHost, dev.stream), cudaSuccess);
  EXPECT_EQ(pageable, 43);
}

TEST(EmulatedRuntime, PageableSourcesAreStagedPinnedOnesReadLate) {
  Device dev;
  int pageable = 1;
  ASSERT_EQ(cudaMemcpyAsync(dev.d, &pageable, sizeof(int), cudaMemcpyHostToDevice, dev.stream), cudaSuccess);
  pageable = 2;
  dev.pinned[0] = 3;
  ASSERT_EQ(cudaMemcpyAsync(dev.d + 1, dev.pinned, sizeof(int), cudaMemcpyHostToDevice, dev.stream), cudaSuccess);
  dev.pinned[0] = 4;
  ASSERT_EQ(cudaStreamSynchronize(dev.stream), cudaSuccess);
  EXPECT_EQ(dev.d[0], 1);
  EXPECT_EQ(dev.d[1], 4);
}

TEST(EmulatedRuntime, LegacyMemsetIsNotOrderedWithNonBlockingStreams) {
  Device dev;
  ASSERT_EQ(cudaMemset(dev.d, 0, 4 * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(dev.pinned, dev.d, sizeof(int), cudaMemcpyDeviceToHost, dev.stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(dev.stream), cudaSuccess);
  EXPECT_EQ(dev.pinned[0], -1) << "the non-blocking stream ran before the legacy stream's memset";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(dev.d[0], 0);
}

TEST(EmulatedRuntime, CopiesMustStayInsideTheirAllocation) {
  Device dev;
  std::vector<int> host(8, 0);
  EXPECT_EQ(cudaMemcpy(dev.d, host.data(), 5 * sizeof(int), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "reading the last error clears it";
  EXPECT_EQ(cudaMemcpy(host.data(), dev.d + 1, 4 * sizeof(int), cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemsetAsync(dev.d + 3, 0, 2 * sizeof(int), dev.stream), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), dev.d, 4 * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  int* gone = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&gone), 64), cudaSuccess);
  ASSERT_EQ(cudaFree(gone), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(host.data(), gone, 4, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  cudaGetLastError();
}

TEST(EmulatedRuntime, AllocationsBeyondTheDeviceMemoryFail) {
  const simt_runtime::DeviceConfig saved = simt_runtime::config();
  simt_runtime::DeviceConfig small = saved;
  small.memory = simt_runtime::stats().device_bytes + (1 << 20);
  simt_runtime::configure(small);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 2 << 20), cudaErrorMemoryAllocation);
  EXPECT_EQ(p, nullptr);
  cudaGetLastError();
  simt_runtime::configure(saved);
}

TEST(EmulatedRuntime, GraphsKeepTheirArgumentsAndForbidWaits) {
  Device dev;
  int value = 1;
  ASSERT_EQ(cudaStreamBeginCapture(dev.stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  launch_kernel(write_value, 2, 32, 0, dev.stream, dev.d, value);
  value = 2;  // the graph keeps 1
  EXPECT_EQ(cudaMemcpy(dev.pinned, dev.d, 4, cudaMemcpyDeviceToHost), cudaErrorStreamCaptureUnsupported);
  cudaGetLastError();
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(dev.stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  cudaGraphDestroy(graph);
  EXPECT_EQ(dev.d[0], -1) << "capturing runs nothing";
  ASSERT_EQ(cudaGraphLaunch(exec, dev.stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(dev.stream), cudaSuccess);
  EXPECT_EQ(dev.d[0], 1);
  EXPECT_EQ(dev.d[1], 1);
  cudaGraphExecDestroy(exec);

  // A wait on the capturing stream, or a pageable copy into it, invalidates the capture.
  ASSERT_EQ(cudaStreamBeginCapture(dev.stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(dev.stream), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(dev.stream, &graph), cudaErrorStreamCaptureInvalidated);
  ASSERT_EQ(cudaStreamBeginCapture(dev.stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(dev.d, &value, sizeof value, cudaMemcpyHostToDevice, dev.stream),
            cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(dev.stream, &graph), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
}

TEST(EmulatedRuntime, LaunchesNeedAValidConfiguration) {
  Device dev;
  launch_kernel(write_value, 1, 2048, 0, dev.stream, dev.d, 1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  launch_kernel(uses_dynamic_shared, 1, 32, 64 * 1024, dev.stream, dev.d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration) << "above 48 KB without the attribute";
  ASSERT_EQ(cudaFuncSetAttribute(uses_dynamic_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
            cudaSuccess);
  launch_kernel(uses_dynamic_shared, 1, 32, 64 * 1024, dev.stream, dev.d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(dev.stream), cudaSuccess);
  EXPECT_EQ(dev.d[0], 7);
  EXPECT_EQ(cudaFuncSetAttribute(uses_dynamic_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024),
            cudaErrorInvalidValue);
  cudaGetLastError();
}

TEST(EmulatedRuntime, AFaultingKernelPoisonsTheContext) {
  Device dev;
  launch_kernel(traps, 1, 32, 0, dev.stream);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the launch itself is valid";
  EXPECT_EQ(cudaStreamSynchronize(dev.stream), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaMemcpy(dev.pinned, dev.d, 4, cudaMemcpyDeviceToHost), cudaErrorLaunchFailure) << "sticky";
  simt_runtime::reset_fault();
  EXPECT_EQ(cudaMemcpy(dev.pinned, dev.d, 4, cudaMemcpyDeviceToHost), cudaSuccess);
}

__global__ void slow_count(int* out) {
  for (int round = 0; round < 64; ++round) __syncthreads();
  if (threadIdx.x == 0) atomicAdd(out, 1);
}

TEST(EmulatedRuntime, ConcurrentStreamsRunWhileTheHostGoesOn) {
  const simt_runtime::DeviceConfig saved = simt_runtime::config();
  simt_runtime::DeviceConfig concurrent = saved;
  concurrent.concurrent = true;
  simt_runtime::configure(concurrent);
  {
    Device dev;  // its stream has a worker thread
    ASSERT_EQ(cudaMemset(dev.d, 0, sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    launch_kernel(slow_count, 256, 256, 0, dev.stream, dev.d);
    EXPECT_EQ(cudaStreamQuery(dev.stream), cudaErrorNotReady) << "the kernel was queued a moment ago";
    ASSERT_EQ(cudaStreamSynchronize(dev.stream), cudaSuccess);
    EXPECT_EQ(dev.d[0], 256);
    EXPECT_EQ(cudaStreamQuery(dev.stream), cudaSuccess);
  }  // the stream's destruction joins its worker
  simt_runtime::configure(saved);
}

TEST(EmulatedCublas, GemmExFollowsColumnMajorRulesAndChecksOperands) {
  // C[2 x 3] = A^T B with A stored [K = 4 x M = 2] (lda 4), B [K = 4 x N = 3] (ldb 4), column-major.
  const int M = 2, N = 3, K = 4;
  std::vector<uint16_t> a(size_t(K * M)), b(size_t(K * N));
  std::vector<float> af(a.size()), bf(b.size());
  for (size_t i = 0; i < a.size(); ++i) af[i] = float(int(i) - 3);
  for (size_t i = 0; i < b.size(); ++i) bf[i] = float(int(i % 5) - 2) * 0.5f;
  auto to_bf16 = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); return uint16_t(u >> 16); };  // exact here
  for (size_t i = 0; i < a.size(); ++i) a[i] = to_bf16(af[i]);
  for (size_t i = 0; i < b.size(); ++i) b[i] = to_bf16(bf[i]);
  void *da, *db, *dc;
  ASSERT_EQ(cudaMalloc(&da, a.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, b.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dc, size_t(M * N) * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate_v2(&h), CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &one, da, CUDA_R_16BF, K, db, CUDA_R_16BF, K, &zero, dc,
                         CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  std::vector<float> c(size_t(M * N));
  ASSERT_EQ(cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int j = 0; j < N; ++j)
    for (int i = 0; i < M; ++i) {
      float ref = 0;
      for (int p = 0; p < K; ++p) ref += af[size_t(i * K + p)] * bf[size_t(j * K + p)];
      EXPECT_EQ(c[size_t(j * M + i)], ref) << i << "," << j;
    }
  // lda below op(A)'s rows, and an operand past its allocation.
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &one, da, CUDA_R_16BF, K - 1, db, CUDA_R_16BF, K, &zero,
                         dc, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N + 1, K, &one, da, CUDA_R_16BF, K, db, CUDA_R_16BF, K, &zero,
                         dc, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_EXECUTION_FAILED);
  cublasDestroy_v2(h);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

}  // namespace

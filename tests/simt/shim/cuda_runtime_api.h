// Stand-in for <cuda_runtime_api.h> under the simt emulator: the subset of the CUDA runtime the
// project's host code uses (src/megaqwen/cuda: the CUDA engine, the megakernel's runner, the GPU
// tests), implemented on the host by tests/simt/emulated_runtime.cpp so that code runs unchanged in
// CPU-only CI against one emulated device. Kernels launched through megaqwen/cuda/launch.cuh run in
// the simt emulator (simt.h).
//
// What the emulated device keeps of CUDA's rules, so host code that passes here is right on a GPU:
//   - device memory is host memory, but the runtime knows every allocation: a copy or memset that
//     leaves one, or touches freed memory, fails with cudaErrorInvalidValue; fresh allocations are
//     filled with 0xff bytes (NaN floats, -1 ints), as undefined contents;
//   - streams are queues that run only when the host waits on them (cudaStreamSynchronize,
//     cudaStreamQuery, cudaDeviceSynchronize, a copy to pageable memory), so a host that reads
//     results before waiting reads stale data; work never overlaps (streams run in host-wait order);
//   - asynchronous copies from pageable host memory take the bytes at the call (CUDA stages them),
//     from pinned memory (cudaMallocHost / cudaHostAlloc) when the copy runs, as on a GPU; the legacy
//     stream's synchronous calls (cudaMemcpy, cudaMemset) do not wait for non-blocking streams;
//   - stream capture records the work into a graph whose kernels keep the arguments they were
//     captured with; waiting on a capturing stream, or a pageable copy into it, is an error;
//   - a launch needs a valid configuration (1..1024 threads, grid dimensions in range, dynamic shared
//     memory within 48 KB or the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize) or it sets the
//     launch error cudaGetLastError returns; a kernel that faults in the emulator (a simt::Error, a
//     trap) makes the stream's later waits return cudaErrorLaunchFailure (the message goes to stderr).
// The device's properties (an sm_90 part, 16 SMs by default, SM count and memory size configurable) are set with
// simt_runtime::configure (tests/simt/emulated_runtime.h).
#pragma once

#include <cstddef>
#include <functional>

#include "../simt.h"

typedef struct CUstream_st* cudaStream_t;  // as the CUDA runtime declares it (an opaque handle)
typedef struct CUgraph_st* cudaGraph_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;
typedef struct CUevent_st* cudaEvent_t;

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorNoDevice = 100,
};
typedef enum cudaError_t cudaError;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMemoryClockRate = 36, cudaDevAttrGlobalMemoryBusWidth = 37 };

constexpr unsigned cudaStreamDefault = 0x0, cudaStreamNonBlocking = 0x1;
constexpr unsigned cudaHostAllocDefault = 0x0, cudaHostAllocMapped = 0x2;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  size_t sharedMemPerMultiprocessor;
  int major, minor;
  int multiProcessorCount;
  int maxThreadsPerBlock;
  int maxThreadsPerMultiProcessor;
  int warpSize;
};

// Every function returns its status and also records a failure as the thread's last error.
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int length, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);

cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned flags);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = 0);
cudaError_t cudaMemset(void* dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream = 0);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);

// Events record the host's clock when the stream reaches them.
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);

// The emulator keeps no kernel names: cudaErrorInvalidDeviceFunction (KernelProfile names them by address).
cudaError_t cudaFuncGetName(const char** name, const void* func);
cudaError_t simt_runtime_func_set_attribute(const void* func, cudaFuncAttribute attr, int value);
cudaError_t simt_runtime_occupancy(int* blocks, const void* func, int threads, size_t dynamic_smem);
template <class T>
cudaError_t cudaFuncSetAttribute(T* func, cudaFuncAttribute attr, int value) {
  return simt_runtime_func_set_attribute(reinterpret_cast<const void*>(func), attr, value);
}
template <class T>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, T* func, int threads, size_t dynamic_smem) {
  return simt_runtime_occupancy(blocks, reinterpret_cast<const void*>(func), threads, dynamic_smem);
}

namespace simt_runtime {

// A kernel launch, as launch.cuh makes it: `body` runs once per thread of the grid (simt::launch);
// co-resident grids (persistent kernels that spin on each other) run every block at once.
struct KernelLaunch {
  const void* func = nullptr;  // identifies the kernel for its attributes
  const char* name = "";
  dim3 grid, block;
  size_t dynamic_smem = 0;
  bool coresident = false;
};
// Queues the launch on `stream` (the closure holds the arguments as they are now); a bad
// configuration sets the last error instead.
void enqueue_kernel(cudaStream_t stream, const KernelLaunch& launch, std::function<void()> body);

}  // namespace simt_runtime

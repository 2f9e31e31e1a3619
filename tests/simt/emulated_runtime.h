// The emulated CUDA device behind tests/simt/shim/cuda_runtime_api.h (see there for the rules it
// keeps): what a test can set and read about it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace simt_runtime {

struct DeviceConfig {
  int devices = 1;                          // cudaGetDeviceCount (0: no device)
  int sms = 16;                             // multiProcessorCount: the megakernel's CTA count (it wants >= 16)
  uint64_t memory = uint64_t(80) << 30;     // totalGlobalMem, and the cap on device allocations
  int major = 9, minor = 0;
  size_t smem_optin = 232448;               // sharedMemPerBlockOptin (H100 / H200: 227 KB)
  size_t smem_per_sm = 233472;              // 228 KB
  // Thread / block order, skew, ... for every launch. MEGAQWEN_EMULATED_SCHEDULE=random sets random
  // orders and a 0.5 skew at start.
  simt::Options kernel_options;
  // Streams created from now on run their work on a worker thread as it arrives (a host can watch
  // a persistent kernel's mapped-memory output while it runs, and stop it). Default: work runs
  // only when the host waits. The environment variable MEGAQWEN_EMULATED_STREAMS=concurrent sets
  // it at start.
  bool concurrent = false;
};
// Replaces the device's configuration (between tests; the default is a 16-SM sm_90 part).
void configure(const DeviceConfig& config);
const DeviceConfig& config();

// Clears a sticky kernel fault and the last error (a test that provokes a fault calls it after).
void reset_fault();

struct Stats {
  uint64_t kernels = 0;         // kernels run
  uint64_t graph_launches = 0;  // cudaGraphLaunch calls
  uint64_t device_bytes = 0;    // device memory allocated now
};
Stats stats();

// For the emulated libraries (cuBLAS): whether [p, p + bytes) lies inside one live device (or
// mapped) allocation; queue host work on a stream as if it were a kernel.
bool device_range(const void* p, size_t bytes);
void enqueue_work(cudaStream_t stream, const char* name, std::function<void()> work);

}  // namespace simt_runtime

// CUDA_CHECK: every CUDA runtime call goes through it. A failure throws megaqwen::Error naming the
// call, the file:line and cudaGetErrorString, so the CLI prints one line and tests can catch it.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace megaqwen::cuda {

[[noreturn]] void cuda_fail(cudaError_t status, const char* call, const char* file, int line);

// Throws megaqwen::Error with `message` (for code that cannot include util/error.h, e.g. under nvcc).
[[noreturn]] void throw_error(const std::string& message);

// Throws if the last kernel launch failed (bad configuration, missing machine code for the GPU).
void check_launch(const char* what, const char* file, int line);

// Whether GPU `device` is usable: cudaGetDeviceCount succeeds, the device exists and has compute
// capability 8.0 or newer (bf16). On false, `why` gets the real reason (the runtime's error string).
bool device_usable(std::string* why, int device = 0);

}  // namespace megaqwen::cuda

#define CUDA_CHECK(call)                                                                   \
  do {                                                                                     \
    const cudaError_t mq_status_ = (call);                                                 \
    if (mq_status_ != cudaSuccess) ::megaqwen::cuda::cuda_fail(mq_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUDA_CHECK_LAUNCH(what) ::megaqwen::cuda::check_launch(what, __FILE__, __LINE__)

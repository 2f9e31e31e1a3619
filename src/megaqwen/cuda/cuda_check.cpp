#include "megaqwen/cuda/cuda_check.h"

#include "megaqwen/util/error.h"

namespace megaqwen::cuda {

void cuda_fail(cudaError_t status, const char* call, const char* file, int line) {
  // A failed runtime call also becomes the thread's last error: clear it, or the next launch check
  // (cudaGetLastError) would report this failure again against an innocent kernel.
  cudaGetLastError();
  fail("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(status), cudaGetErrorString(status), call, file, line);
}

void throw_error(const std::string& message) { throw Error(message); }

void check_launch(const char* what, const char* file, int line) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) cuda_fail(status, what, file, line);
}

bool device_usable(std::string* why, int device) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    if (why) *why = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
    return false;
  }
  if (count == 0) {
    if (why) *why = "cudaGetDeviceCount found no CUDA device";
    return false;
  }
  if (device < 0 || device >= count) {
    if (why) *why = "there is no CUDA device " + std::to_string(device) + " (" + std::to_string(count) + " found)";
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = "cudaGetDeviceProperties failed for device " + std::to_string(device);
    return false;
  }
  if (prop.major < 8) {
    if (why)
      *why = std::string(prop.name) + " has compute capability " + std::to_string(prop.major) + "." +
             std::to_string(prop.minor) + "; the CUDA engine needs 8.0 or newer (bf16)";
    return false;
  }
  return true;
}

}  // namespace megaqwen::cuda

// CudaStream: one non-blocking CUDA stream owned by an object (RAII, move-only), so a constructor
// that throws after creating it does not leak it. Destruction waits for the stream's work, then
// destroys it; declare it before the members whose work runs on it (they are destroyed first).
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "megaqwen/cuda/cuda_check.h"

namespace megaqwen::cuda {

class CudaStream {
 public:
  CudaStream() = default;
  static CudaStream non_blocking() {
    CudaStream s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream_, cudaStreamNonBlocking));
    return s;
  }
  ~CudaStream() { release(); }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  CudaStream(CudaStream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  CudaStream& operator=(CudaStream&& other) noexcept {
    if (this != &other) {
      release();
      stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
  }
  cudaStream_t get() const { return stream_; }

 private:
  void release() {
    if (!stream_) return;
    cudaStreamSynchronize(stream_);  // errors are the work's, reported where it was checked
    cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }
  cudaStream_t stream_ = nullptr;
};

}  // namespace megaqwen::cuda

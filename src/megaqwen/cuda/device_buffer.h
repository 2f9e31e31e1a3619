// DeviceBuffer<T>: one cudaMalloc'd array, freed on destruction (RAII, move-only). Sizes are in
// elements; bytes() gives the allocation size. Allocation failures throw through CUDA_CHECK.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "megaqwen/cuda/cuda_check.h"

namespace megaqwen::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { resize(count); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }

  // Reallocates (contents are lost) unless the size is unchanged.
  void resize(size_t count) {
    if (count == count_) return;
    release();
    if (count > 0) {
      const cudaError_t status = cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T));
      if (status != cudaSuccess) {
        data_ = nullptr;
        cudaGetLastError();
        size_t free_bytes = 0, total_bytes = 0;
        cudaMemGetInfo(&free_bytes, &total_bytes);
        cudaGetLastError();
        throw_error("cannot allocate " + std::to_string(count * sizeof(T) >> 20) + " MiB on the GPU (" +
                    cudaGetErrorName(status) + "; " + std::to_string(free_bytes >> 20) + " of " +
                    std::to_string(total_bytes >> 20) + " MiB free)");
      }
    }
    count_ = count;
  }
  void release() noexcept {
    if (data_) cudaFree(data_);
    data_ = nullptr;
    count_ = 0;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

// Pinned (page-locked) host memory, for copies the GPU can do asynchronously.
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t count) {
    if (count > 0) CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), count * sizeof(T)));
    count_ = count;
  }
  ~PinnedBuffer() {
    if (data_) cudaFreeHost(data_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace megaqwen::cuda

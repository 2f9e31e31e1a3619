// Copies between a device cache laid out [layers, context, row elements] and packed host rows
// [layers, rows, row elements]: the CUDA engines' save_state() / restore_state() (engine_state.h).
// One transfer per layer on the engine's stream, then a synchronize: a saved sequence is complete
// (or back in place) when the call returns.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "megaqwen/cuda/cuda_check.h"
#include "megaqwen/cuda/device_buffer.h"

namespace megaqwen::cuda {

template <class T>
std::vector<T> download_cache_rows(const T* cache, size_t layers, size_t context, size_t row, size_t rows,
                                   cudaStream_t stream) {
  std::vector<T> out(layers * rows * row);
  if (rows > 0)
    for (size_t l = 0; l < layers; ++l)
      CUDA_CHECK(cudaMemcpyAsync(out.data() + l * rows * row, cache + l * context * row, rows * row * sizeof(T),
                                 cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

template <class T>
void upload_cache_rows(const std::vector<T>& packed, T* cache, size_t layers, size_t context, size_t row, size_t rows,
                       cudaStream_t stream) {
  if (rows > 0)
    for (size_t l = 0; l < layers; ++l)
      CUDA_CHECK(cudaMemcpyAsync(cache + l * context * row, packed.data() + l * rows * row, rows * row * sizeof(T),
                                 cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

// A whole buffer to the host and back (recurrent states).
template <class T>
std::vector<T> download(const DeviceBuffer<T>& buffer, cudaStream_t stream) {
  return download_cache_rows(buffer.data(), 1, buffer.size(), 1, buffer.size(), stream);
}
template <class T>
void upload(const std::vector<T>& host, DeviceBuffer<T>& buffer, cudaStream_t stream) {
  upload_cache_rows(host, buffer.data(), 1, buffer.size(), 1, host.size(), stream);
}

}  // namespace megaqwen::cuda

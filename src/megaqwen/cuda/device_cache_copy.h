// Copies of a device cache's rows between two layouts, [layers, context, row elements] with
// different contexts: the engine's cache (its full context) and a saved sequence's packed copy (its
// length): the CUDA engines' save_state() / restore_state() (engine_state.h). Device to device, one
// copy per layer on the engine's stream, then a synchronize, so the copy is whole when the call
// returns and may be restored into another engine on another stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "megaqwen/cuda/cuda_check.h"
#include "megaqwen/cuda/device_buffer.h"

namespace megaqwen::cuda {

// The first `rows` rows of each of `layers` layers, from `src` (layer stride src_context rows) to
// `dst` (layer stride dst_context rows).
template <class T>
void copy_cache_rows(T* dst, size_t dst_context, const T* src, size_t src_context, size_t layers, size_t row,
                     size_t rows, cudaStream_t stream) {
  if (rows > 0 && row > 0)
    for (size_t l = 0; l < layers; ++l)
      CUDA_CHECK(cudaMemcpyAsync(dst + l * dst_context * row, src + l * src_context * row, rows * row * sizeof(T),
                                 cudaMemcpyDeviceToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

// A copy of a whole buffer (recurrent states).
template <class T>
DeviceBuffer<T> clone(const DeviceBuffer<T>& from, cudaStream_t stream) {
  DeviceBuffer<T> to(from.size());
  copy_cache_rows(to.data(), 0, from.data(), 0, 1, from.size(), 1, stream);
  return to;
}
template <class T>
void copy_into(DeviceBuffer<T>& to, const DeviceBuffer<T>& from, cudaStream_t stream) {
  copy_cache_rows(to.data(), 0, from.data(), 0, 1, from.size(), 1, stream);
}

// A buffer's contents in host memory and back (state files: engine/state_file.h). Synchronous: the
// saved copies they read or fill are complete (copy_cache_rows synchronizes) and no stream uses them.
template <class T>
std::vector<T> to_host(const DeviceBuffer<T>& from) {
  std::vector<T> out(from.size());
  if (!out.empty()) CUDA_CHECK(cudaMemcpy(out.data(), from.data(), from.bytes(), cudaMemcpyDeviceToHost));
  return out;
}
template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& from) {
  DeviceBuffer<T> out(from.size());
  if (!from.empty()) CUDA_CHECK(cudaMemcpy(out.data(), from.data(), out.bytes(), cudaMemcpyHostToDevice));
  return out;
}

}  // namespace megaqwen::cuda

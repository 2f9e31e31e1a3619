// launch_kernel(kernel, grid, block, smem, stream, args...) is kernel<<<grid, block, smem, stream>>>(args...);
// launch_persistent(...) the same for a grid whose blocks wait on each other (all must be resident).
// Every launch goes through these two so that the simt emulator's runtime (tests/simt, built with
// MEGAQWEN_SIMT) can run the very launchers of kernels.cu and megakernel.cu on the CPU: there the
// kernel and its arguments (converted to the kernel's parameter types now, as a launch copies them)
// are queued on the emulated stream. While a KernelProfile is active on the thread (kernel_profile.h,
// MEGAQWEN_PEROP_PROFILE) each launch_kernel is timed between two events.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "megaqwen/cuda/kernel_profile.h"

namespace megaqwen::cuda {

// An argument converts to its parameter's type as in a call (copy-initialization): no casts.
template <typename T>
T as_parameter(T value) {
  return value;
}

#if defined(MEGAQWEN_SIMT)
namespace detail {
template <typename... P, typename... A>
void enqueue(bool coresident, const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
             cudaStream_t stream, A&&... args) {
  simt_runtime::enqueue_kernel(stream, {reinterpret_cast<const void*>(kernel), name, grid, block, smem, coresident},
                               [kernel, ... a = as_parameter<P>(std::forward<A>(args))] { kernel(a...); });
}
}  // namespace detail
template <typename... P, typename... A>
void launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A&&... args) {
  KernelProfile* profile = active_kernel_profile();
  if (profile) profile->before_launch(reinterpret_cast<const void*>(kernel), stream);
  detail::enqueue(false, "kernel", kernel, grid, block, smem, stream, std::forward<A>(args)...);
  if (profile) profile->after_launch(stream);
}
template <typename... P, typename... A>
void launch_persistent(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A&&... args) {
  detail::enqueue(true, "persistent kernel", kernel, grid, block, smem, stream, std::forward<A>(args)...);
}
#else
template <typename... P, typename... A>
void launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A&&... args) {
  KernelProfile* profile = active_kernel_profile();
  if (profile) profile->before_launch(reinterpret_cast<const void*>(kernel), stream);
  kernel<<<grid, block, smem, stream>>>(as_parameter<P>(std::forward<A>(args))...);
  if (profile) profile->after_launch(stream);
}
// On a GPU the caller guarantees co-residency (one CTA per SM, checked against the occupancy).
template <typename... P, typename... A>
void launch_persistent(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A&&... args) {
  kernel<<<grid, block, smem, stream>>>(as_parameter<P>(std::forward<A>(args))...);
}
#endif

}  // namespace megaqwen::cuda

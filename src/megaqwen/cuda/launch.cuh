// launch_kernel(kernel, grid, block, smem, stream, args...) is kernel<<<grid, block, smem, stream>>>(args...);
// launch_persistent(...) the same for a grid whose blocks wait on each other (all must be resident).
// Every launch goes through these two so that the simt emulator's runtime (tests/simt, built with
// MEGAQWEN_SIMT) can run the very launchers of kernels.cu and megakernel.cu on the CPU: there the
// kernel and its arguments (converted to the kernel's parameter types now, as a launch copies them)
// are queued on the emulated stream. While a KernelProfile is active on the thread (kernel_profile.h,
// MEGAQWEN_PEROP_PROFILE) each launch_kernel is timed between two events.
//
// Programmatic dependent launch (Hopper; MEGAQWEN_PDL=on, opt-in until measured): launch_kernel then
// lets a kernel be launched while its predecessor in the stream (or CUDA graph) still runs, so the
// launch latency and the new grid's ramp-up overlap the old grid's tail. Every kernel launched so
// begins with pdl_begin() (kernels/common.cuh): it waits there until the predecessor has finished and
// its writes are visible, then lets its own successor launch. scripts/sass-report.sh --check-pdl
// (ctest sass_pdl_wait_first) checks that each of them waits before its first global memory access.
// launch_persistent never uses it (the megakernel's CTAs must all be resident at once).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "megaqwen/cuda/kernel_profile.h"
#include "megaqwen/cuda/programmatic_launch.h"

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
  if (programmatic_launch()) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    // An error here is also the thread's last error: the caller's CUDA_CHECK_LAUNCH reports it.
    (void)cudaLaunchKernelEx(&config, kernel, as_parameter<P>(std::forward<A>(args))...);
  } else {
    kernel<<<grid, block, smem, stream>>>(as_parameter<P>(std::forward<A>(args))...);
  }
  if (profile) profile->after_launch(stream);
}
// On a GPU the caller guarantees co-residency (one CTA per SM, checked against the occupancy).
template <typename... P, typename... A>
void launch_persistent(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A&&... args) {
  kernel<<<grid, block, smem, stream>>>(as_parameter<P>(std::forward<A>(args))...);
}
#endif

}  // namespace megaqwen::cuda

// Shared device helpers: bf16 unpacking of 16-byte loads, warp and block reductions, the
// counter-based random numbers of the sampling kernels. Included by every kernel file.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace megaqwen::cuda {

using bf16 = __nv_bfloat16;

constexpr unsigned kFullMask = 0xffffffffu;

// The block's dynamic shared memory as `T* name`: extern __shared__ on a GPU, the emulator's
// per-block buffer under the simt emulator (tests/simt).
#if defined(MEGAQWEN_SIMT)
#define MEGAQWEN_EXTERN_SHARED(T, name) T* name = ::simt::dynamic_shared<T>()
#else
#define MEGAQWEN_EXTERN_SHARED(T, name) extern __shared__ T name[]
#endif

__host__ __device__ constexpr int div_up(int a, int b) { return (a + b - 1) / b; }

// The first statement of every kernel that launch_kernel runs (launch.cuh: programmatic dependent
// launch): waits until the grid this one may overlap has finished and its writes are visible (at once
// when it was launched the ordinary way), then lets the next kernel in the stream begin launching (it
// waits in its own pdl_begin). Before sm_90 and on the emulator, nothing.
__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// 8 bf16 in a 16-byte word -> 8 floats (bf16 is the top half of an fp32; element 0 is the low half).
__device__ __forceinline__ void unpack_bf16x8(const uint4& u, float f[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void unpack_bf16x4(const uint2& u, float f[4]) {
  f[0] = __uint_as_float(u.x << 16);
  f[1] = __uint_as_float(u.x & 0xffff0000u);
  f[2] = __uint_as_float(u.y << 16);
  f[3] = __uint_as_float(u.y & 0xffff0000u);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` is 32 floats of shared memory; safe to call repeatedly.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // the previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// Float -> uint32 key whose unsigned order is the float order (NaN excluded): the radix selections
// of both samplers compare keys. -0 and +0 share a key (they compare equal, so ties go by id); -inf
// maps to 0x007fffff, so key 0 sorts below every real value (padding).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = f == 0.0f ? 0u : __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Counter-based random numbers: a uniform in [0, 1) from (seed, step, index) with no state, so a
// draw does not depend on thread counts or launch order. splitmix64's finalizer over a mix of the
// three keys; 53 random bits.
__host__ __device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__host__ __device__ __forceinline__ double uniform_at(uint64_t seed, uint64_t step, uint32_t index) {
  const uint64_t h = mix64(mix64(seed ^ 0x5851f42d4c957f2dull) ^ mix64(step) ^ (uint64_t(index) << 1 | 1));
  return double(h >> 11) * 0x1.0p-53;
}

}  // namespace megaqwen::cuda

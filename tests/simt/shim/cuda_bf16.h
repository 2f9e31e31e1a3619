// Stand-in for <cuda_bf16.h> under the simt emulator (see cuda_runtime.h here): a minimal
// __nv_bfloat16 (the top half of an fp32) with round-to-nearest-even conversion.
#pragma once

#include <cstdint>

#include "../simt.h"

struct __nv_bfloat16 {
  uint16_t __x;
};

inline __nv_bfloat16 __float2bfloat16(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {uint16_t((u >> 16) | 0x40u)};  // NaN stays a (quiet) NaN
  return {uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return __uint_as_float(unsigned(b.__x) << 16); }

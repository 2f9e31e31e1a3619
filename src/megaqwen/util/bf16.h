// Scalar conversions between the stored weight formats (bf16, f16) and fp32.
// bf16 is the top half of an fp32; f16 needs a real conversion (subnormals, inf, nan).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace megaqwen {

inline float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); }

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

// Portable f16 conversions, bit-exact with the compiler's _Float16 (round to nearest even,
// subnormals, inf; NaN stays NaN). Used where _Float16 is missing (clang < 15 on x86).
inline float f16_to_f32_soft(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant x 2^-24, exact in fp32
    const float v = float(mant) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(v) | sign);
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, nan
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t f32_to_f16_soft(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // quiet NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (abs < 0x38800000u) {  // below 2^-14: a subnormal half (or zero / the smallest normal)
    const float x = std::bit_cast<float>(abs) * 0x1p24f;  // exact; the half's mantissa units
    uint32_t m = uint32_t(x);
    const float frac = x - float(m);
    if (frac > 0.5f || (frac == 0.5f && (m & 1u))) ++m;
    return uint16_t(sign | m);
  }
  const uint32_t r = abs - 0x38000000u;  // rebias the exponent from 127 to 15
  return uint16_t(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}

#ifdef __FLT16_MANT_DIG__  // the compiler has _Float16 (GCC 12, clang >= 15 on x86)
inline float f16_to_f32(uint16_t h) { return float(std::bit_cast<_Float16>(h)); }
inline uint16_t f32_to_f16(float value) { return std::bit_cast<uint16_t>(_Float16(value)); }
#else
inline float f16_to_f32(uint16_t h) { return f16_to_f32_soft(h); }
inline uint16_t f32_to_f16(float value) { return f32_to_f16_soft(value); }
#endif

}  // namespace megaqwen

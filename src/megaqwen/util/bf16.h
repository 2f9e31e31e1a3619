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

inline float f16_to_f32(uint16_t h) { return float(std::bit_cast<_Float16>(h)); }
inline uint16_t f32_to_f16(float value) { return std::bit_cast<uint16_t>(_Float16(value)); }

}  // namespace megaqwen

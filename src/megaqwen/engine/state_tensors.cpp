#include "megaqwen/engine/state_tensors.h"

#include "megaqwen/util/error.h"

namespace megaqwen {

// Non-finite: every exponent bit set (inf or NaN), read from the raw bits (the bytes need not be aligned).
void StateTensorSource::check_finite(std::string_view name, DType dtype, std::span<const uint8_t> bytes) {
  const bool f32 = dtype == DType::F32;
  const size_t width = f32 ? 4 : 2;
  const uint32_t exponent = f32 ? 0x7f800000u : 0x7f80u;
  for (size_t i = 0; i + width <= bytes.size(); i += width) {
    uint32_t bits = 0;
    std::memcpy(&bits, bytes.data() + i, width);
    if ((bits & exponent) == exponent) fail("the tensor {} holds a non-finite value at element {}", name, i / width);
  }
}

}  // namespace megaqwen

// StateTensor: a saved sequence's cache as named host arrays, the form in which a state file holds it
// (state_file.h). Each engine names and shapes its own (Engine::state_tensors) and builds a state back
// from them (Engine::state_from_tensors), reading through a StateTensorSource that checks every
// tensor's dtype and shape against what the engine expects before a byte is used.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "megaqwen/model/safetensors.h"

namespace megaqwen {

struct StateTensor {
  TensorSpec spec;
  std::vector<uint8_t> bytes;  // little-endian, spec.byte_size() of them
};

template <class T>
StateTensor make_state_tensor(std::string name, DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  StateTensor t{TensorSpec{std::move(name), dtype, std::move(shape)}, std::vector<uint8_t>(values.size() * sizeof(T))};
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

class StateTensorSource {
 public:
  virtual ~StateTensorSource() = default;
  // The bytes of tensor `name`, which must exist with exactly this dtype and shape; throws Error
  // naming the tensor and the difference otherwise. The bytes need not be aligned.
  virtual std::span<const uint8_t> get(std::string_view name, DType dtype, std::span<const int64_t> shape) const = 0;
  virtual bool has(std::string_view name) const = 0;

  // get() copied into a vector of T (T's size must match the dtype's). Floating-point tensors must
  // hold finite values only (a cache never holds another): Error naming the tensor and element.
  template <class T>
  std::vector<T> read(std::string_view name, DType dtype, std::vector<int64_t> shape) const {
    const std::span<const uint8_t> bytes = get(name, dtype, shape);
    std::vector<T> out(bytes.size() / sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    if (dtype == DType::F32 || dtype == DType::BF16) check_finite(name, dtype, bytes);
    return out;
  }

 private:
  static void check_finite(std::string_view name, DType dtype, std::span<const uint8_t> bytes);
};

}  // namespace megaqwen

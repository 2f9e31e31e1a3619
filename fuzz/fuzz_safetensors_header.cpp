// libFuzzer target: arbitrary bytes as a whole safetensors file. parse_safetensors_header must either
// return a header whose every tensor lies inside the file, or throw megaqwen::Error; any other
// exception, crash, sanitizer report, leak or hang is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>

#include "megaqwen/model/safetensors.h"
#include "megaqwen/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> file(data, size);
  try {
    const megaqwen::SafetensorsHeader header = megaqwen::parse_safetensors_header(file, "fuzz.safetensors");
    // What the parser promises: each tensor's bytes are in the file and match its shape and dtype.
    if (header.data_offset < 8 || header.data_offset > size) std::abort();
    const uint64_t data_size = size - header.data_offset;
    for (const auto& t : header.tensors) {
      if (t.begin > t.end || t.end > data_size) std::abort();
      if (uint64_t(t.element_count()) * megaqwen::dtype_size(t.dtype) != t.end - t.begin) std::abort();
      (void)t.shape_string();
      (void)megaqwen::dtype_name(t.dtype);
    }
  } catch (const megaqwen::Error&) {
    // Rejected with a message: the expected outcome for bad input.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}

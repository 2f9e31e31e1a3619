// Safetensors: the Hugging Face weight format. An 8-byte little-endian header length N, N bytes of
// JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data.
// The header is untrusted input: parse_safetensors_header validates every entry before any byte of
// tensor data is touched (in bounds, no overlap, byte size = shape x dtype size).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace megaqwen {

enum class DType { BF16, F16, F32, F64, I8, U8, I16, I32, I64, BOOL, F8_E4M3, F8_E5M2 };

const char* dtype_name(DType dtype);  // as written in safetensors: "BF16", "F32", ...
size_t dtype_size(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets within the data section

  int64_t element_count() const;
  std::string shape_string() const;  // "[151936, 1024]"
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;                 // 8 + N: where the data section starts in the file
  std::vector<TensorInfo> tensors;          // sorted by name (not file order)
  std::map<std::string, std::string> metadata;
};

// Validates and parses the header of a whole safetensors file held in memory; `source` names the
// file in error messages. Throws Error on any inconsistency.
SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> file, const std::string& source);

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t byte_size() const;
};

// Streams a safetensors file: the header is written from the specs up front, then each tensor's
// bytes in spec order, so a multi-GB synthetic model never has to sit in memory whole.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::filesystem::path& path, std::vector<TensorSpec> specs,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  // Appends bytes of the current tensor; a tensor may arrive in several pieces.
  void write(std::span<const uint8_t> bytes);
  void finish();  // checks every tensor was written in full and flushes

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One-shot helper for small files: tensors as (spec, little-endian bytes) pairs.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<TensorSpec, std::span<const uint8_t>>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace megaqwen

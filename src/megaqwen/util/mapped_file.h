// MappedFile: a read-only memory map of a whole file (weights are used in place, never copied).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace megaqwen {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws Error naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace megaqwen

// MappedFile: a read-only memory map of a whole file (weights are used in place, never copied).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
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

  // Puts the file's bytes into anonymous memory in transparent huge pages (util/huge_pages.h), at the
  // same address: pointers into bytes() stay valid and read the same values, from then on without
  // the file behind them. For what a CPU engine streams every token. The map starts on a 2 MiB
  // boundary for this. Done piece by piece (read from the file, then mremap over the mapped piece), so it needs
  // at most one piece of memory beyond the result. Returns false, with the reason in *why and the
  // mapping as it was, where huge pages are off, the file is smaller than one, or memory runs out;
  // true once moved (again on later calls). Safe to call from several threads.
  bool move_to_huge_pages(std::string* why = nullptr);
  bool in_huge_pages() const;
  // Bytes of the file the kernel backs with huge pages now (nullopt: unknown).
  std::optional<uint64_t> huge_page_bytes() const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
  mutable std::mutex move_mutex_;
  bool moved_ = false;
};

}  // namespace megaqwen

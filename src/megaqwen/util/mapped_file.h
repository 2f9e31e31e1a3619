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

  // Where the bytes sit in transparent huge pages (util/huge_pages.h), if they do.
  enum class HugePages {
    kNo,
    kFilePages,  // the page cache's own large folios, mapped 2 MiB at a time: nothing copied
    kCopied,     // a copy in anonymous memory, no longer backed by the file
  };

  // Puts the file's bytes in transparent huge pages at the same address: pointers into bytes() stay
  // valid and read the same values. For what a CPU engine streams every token. The map starts on a
  // 2 MiB boundary for this. First the whole map is faulted in (MADV_POPULATE_READ): where the page
  // cache holds the file in large folios (recent kernels on ext4, xfs, btrfs), most of it is then
  // mapped 2 MiB at a time already, and nothing more is done. Otherwise the bytes are copied piece
  // by piece (read from the file into anonymous memory advised MADV_HUGEPAGE, then mremap over the
  // mapped piece), so it needs at most one piece of memory beyond the result. kNo, with the reason in
  // *why and the mapping as it was, where huge pages are off, the file is smaller than one, memory
  // runs out, or a copy was needed and `copy` is kNever. Later calls return the first answer that was
  // not kNo. Safe to call from several threads.
  enum class Copy { kNever, kIfNeeded, kAlways };
  HugePages use_huge_pages(Copy copy = Copy::kIfNeeded, std::string* why = nullptr);
  HugePages huge_pages() const;
  // Bytes of the file the kernel backs with huge pages now (nullopt: unknown).
  std::optional<uint64_t> huge_page_bytes() const;

 private:
  // One piece of use_huge_pages' copy: read into fresh memory, moved over the map. "" or the error.
  std::string copy_piece(size_t offset, size_t piece);

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
  mutable std::mutex move_mutex_;
  HugePages huge_pages_ = HugePages::kNo;
};

}  // namespace megaqwen

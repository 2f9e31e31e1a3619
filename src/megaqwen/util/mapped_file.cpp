#include "megaqwen/util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "megaqwen/util/error.h"
#include "megaqwen/util/huge_pages.h"

// Linux 5.14; older kernels answer EINVAL, and the copy decides.
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace megaqwen {

namespace {

size_t page_rounded(size_t bytes) { return (bytes + huge_pages::kPage - 1) / huge_pages::kPage * huge_pages::kPage; }

// Bytes copied and moved at a time: large enough that the copies stream, small enough to be a
// negligible amount of extra memory.
constexpr size_t kMovePiece = size_t(32) << 20;

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{} is not a regular file", path);
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    // On a 2 MiB boundary, so that move_to_huge_pages() can put whole huge pages in its place.
    void* p = huge_pages::map_aligned(size_, PROT_READ, MAP_PRIVATE, fd);
    if (!p) {
      const int error = errno;
      ::close(fd);
      fail("cannot map {}: {}", path, std::strerror(error));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  fd_ = fd;  // kept: move_to_huge_pages() reads this file, whatever the path names by then
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), page_rounded(size_));
  ::close(fd_);
}

MappedFile::HugePages MappedFile::use_huge_pages(Copy copy, std::string* why) {
  std::lock_guard lock(move_mutex_);
  if (huge_pages_ != HugePages::kNo) return huge_pages_;
  if (size_ < huge_pages::kHugePage) {
    if (why) *why = "the file is smaller than one huge page";
    return HugePages::kNo;
  }
  if (!huge_pages::available(why)) return HugePages::kNo;
  const size_t length = page_rounded(size_);
  auto* const target = const_cast<uint8_t*>(data_);
  // The page cache's own huge pages, where it has them for this file: at least 90% mapped so (the
  // tail past the last 2 MiB boundary never is). A failed populate (old kernel; a file that shrank)
  // leaves the question to the copy.
  if (copy != Copy::kAlways && ::madvise(target, length, MADV_POPULATE_READ) == 0) {
    const std::optional<uint64_t> backed = huge_pages::backed_bytes(target, length);
    if (backed && *backed >= length / 10 * 9) return huge_pages_ = HugePages::kFilePages;
  }
  if (copy == Copy::kNever) {
    if (why) *why = "the page cache maps it in 4 KiB pages, and no copy was allowed";
    return HugePages::kNo;
  }
  // Pieces on several threads: most of the time is the kernel finding free 2 MiB pages (compacting
  // memory where it is fragmented), which runs in parallel.
  const size_t pieces = (length + kMovePiece - 1) / kMovePiece;
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  std::string first_error;
  auto work = [&] {
    for (size_t i = next++; i < pieces; i = next++) {
      const size_t offset = i * kMovePiece;
      std::string error = copy_piece(offset, std::min(kMovePiece, length - offset));
      if (error.empty()) continue;
      std::lock_guard error_lock(error_mutex);
      if (first_error.empty()) first_error = std::move(error);
      next = pieces;  // the pieces moved so far stay moved (same bytes); the rest stays mapped
    }
  };
  const size_t workers = std::min<size_t>({pieces, std::max(1u, std::thread::hardware_concurrency()), 8});
  std::vector<std::thread> threads;
  for (size_t w = 1; w < workers; ++w) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  if (!first_error.empty()) {
    if (why) *why = first_error;
    return HugePages::kNo;
  }
  return huge_pages_ = HugePages::kCopied;
}

std::string MappedFile::copy_piece(size_t offset, size_t piece) {
  void* fresh = huge_pages::map_aligned(piece, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
  if (!fresh) return "out of memory";
  ::madvise(fresh, piece, MADV_HUGEPAGE);  // a no-op where THP is "always"
  // Read from the file, not copied from the map: no page faults on the file's pages (measured 2-3x
  // faster).
  const size_t want = std::min(piece, size_ - offset);  // the rest of the last page stays zero
  size_t got = 0;
  int error = 0;
  while (got < want) {
    const ssize_t n = ::pread(fd_, static_cast<uint8_t*>(fresh) + got, want - got, off_t(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = errno;
    if (n <= 0) break;
    got += size_t(n);
  }
  if (got < want) {
    ::munmap(fresh, piece);
    return error ? std::string("cannot read it: ") + std::strerror(error) : "the file is shorter than when it was mapped";
  }
  ::mprotect(fresh, piece, PROT_READ);
  if (::mremap(fresh, piece, piece, MREMAP_MAYMOVE | MREMAP_FIXED, const_cast<uint8_t*>(data_) + offset) == MAP_FAILED) {
    error = errno;
    ::munmap(fresh, piece);
    return std::string("mremap failed: ") + std::strerror(error);
  }
  return {};
}

MappedFile::HugePages MappedFile::huge_pages() const {
  std::lock_guard lock(move_mutex_);
  return huge_pages_;
}

std::optional<uint64_t> MappedFile::huge_page_bytes() const {
  if (!data_) return 0;
  return huge_pages::backed_bytes(data_, page_rounded(size_));
}

}  // namespace megaqwen

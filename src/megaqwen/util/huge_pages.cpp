#include "megaqwen/util/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace megaqwen::huge_pages {

bool available(std::string* why) {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string setting;
  if (!std::getline(in, setting)) {
    if (why) *why = "this kernel has no transparent huge pages";
    return false;
  }
  // The active choice is bracketed: "always [madvise] never".
  if (setting.find("[always]") != std::string::npos || setting.find("[madvise]") != std::string::npos) return true;
  if (why) *why = "transparent huge pages are off (/sys/kernel/mm/transparent_hugepage/enabled: " + setting + ")";
  return false;
}

void* map_aligned(size_t bytes, int prot, int flags, int fd) {
  const size_t length = (bytes + kPage - 1) / kPage * kPage;
  // Reserve a huge page more than needed, place the mapping on the first 2 MiB boundary inside, and
  // give back the slack on either side.
  void* reserved = ::mmap(nullptr, length + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<uintptr_t>(reserved);
  const uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
  void* p = ::mmap(reinterpret_cast<void*>(aligned), length, prot, flags | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    const int error = errno;
    ::munmap(reserved, length + kHugePage);
    errno = error;
    return nullptr;
  }
  if (aligned > base) ::munmap(reserved, aligned - base);
  const uintptr_t end = aligned + length, reserved_end = base + length + kHugePage;
  if (reserved_end > end) ::munmap(reinterpret_cast<void*>(end), reserved_end - end);
  return p;
}

void advise(void* address, size_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(address);
  const uintptr_t first = (begin + kHugePage - 1) / kHugePage * kHugePage, last = (begin + bytes) / kHugePage * kHugePage;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

std::optional<uint64_t> backed_bytes(const void* address, size_t bytes) {
  std::ifstream in("/proc/self/smaps");
  if (!in) return std::nullopt;
  const auto begin = reinterpret_cast<uintptr_t>(address), end = begin + bytes;
  uint64_t total = 0;
  bool inside = false;
  std::string line;
  while (std::getline(in, line)) {
    uintptr_t lo = 0, hi = 0;
    // A mapping's first line is "lo-hi perms offset dev inode [path]"; its fields follow.
    // (no field name parses as two hex numbers joined by '-').
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR, &lo, &hi) == 2) {
      inside = lo < end && hi > begin;
      continue;
    }
    if (!inside) continue;
    const size_t colon = line.find(':');
    const std::string field = line.substr(0, colon);
    if (field != "AnonHugePages" && field != "FilePmdMapped" && field != "ShmemPmdMapped") continue;
    std::istringstream fields(line.substr(colon + 1));
    uint64_t kib = 0;
    if (fields >> kib) total += kib * 1024;
  }
  return total;
}

}  // namespace megaqwen::huge_pages

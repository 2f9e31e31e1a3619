#include "megaqwen/util/memory_bandwidth.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "megaqwen/util/huge_pages.h"

namespace megaqwen {

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(uint64_t);
  // In huge pages where the kernel has them, as the CPU engines' weights are: with 4 KiB pages the
  // reads stall at every page, and the ceiling measured would be too low.
  const size_t length = n * sizeof(uint64_t);
  void* region = huge_pages::map_aligned(length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
  if (!region) return 0;
  ::madvise(region, length, MADV_HUGEPAGE);
  auto* const buffer = static_cast<uint64_t*>(region);
  pool.parallel_for(n, [&](size_t b, size_t e) {  // touch every page from the thread that reads it
    for (size_t i = b; i < e; ++i) buffer[i] = i * 0x9e3779b97f4a7c15ull;
  }, 4096);
  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    pool.parallel_for(n, [&](size_t b, size_t e) {
      uint64_t acc[8] = {};
      size_t i = b;
      for (; i + 8 <= e; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += buffer[i + j];
      for (; i < e; ++i) acc[0] += buffer[i];
      uint64_t s = 0;
      for (uint64_t v : acc) s += v;
      sink += s;
    }, 4096);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, double(n * sizeof(uint64_t)) / seconds / 1e9);
  }
  ::munmap(region, length);
  return best;
}

}  // namespace megaqwen

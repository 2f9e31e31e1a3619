// Transparent huge pages (2 MiB) for memory a CPU engine streams end to end every token: the
// weights. With 4 KiB pages a decode step that reads 1.2 GB misses the TLB every 4 KiB and the
// hardware prefetchers restart at every page; in 2 MiB pages the same GEMVs use the machine's
// bandwidth far better (Qwen3-0.6B decode 1.08-1.27x on 2 threads, docs/PERFORMANCE.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace megaqwen::huge_pages {

inline constexpr size_t kHugePage = size_t(2) << 20;
inline constexpr size_t kPage = 4096;

// Whether the kernel gives anonymous memory huge pages when asked (madvise) or always; false, with
// the reason in *why, where transparent huge pages are off or absent.
bool available(std::string* why = nullptr);

// `bytes` (rounded up to whole 4 KiB pages) of address space that starts on a 2 MiB boundary,
// mapped with `prot` and `flags` (MAP_ANONYMOUS, or a file with MAP_FIXED semantics handled here:
// `fd` >= 0 maps that file from offset 0). nullptr where the kernel refuses.
void* map_aligned(size_t bytes, int prot, int flags, int fd);

// Asks for huge pages over the whole 2 MiB pages inside [address, address + bytes) (MADV_HUGEPAGE),
// for memory not touched yet: a std::vector's storage between reserve() and its first fill.
void advise(void* address, size_t bytes);

// Bytes of the mappings overlapping [address, address + bytes) that the kernel maps with huge pages
// now (AnonHugePages, FilePmdMapped and ShmemPmdMapped in /proc/self/smaps); nullopt where smaps
// cannot be read.
std::optional<uint64_t> backed_bytes(const void* address, size_t bytes);

}  // namespace megaqwen::huge_pages

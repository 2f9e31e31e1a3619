// Host memory the engines may take: a large allocation (the CPU engines' KV caches) is checked
// against what the machine has available before it is made, so a context too large for this machine
// is a clear error with both numbers instead of the kernel's OOM killer halfway through zero-filling.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace megaqwen {

// MemAvailable from /proc/meminfo (what can be allocated without swapping), or nullopt where the
// file is missing or unreadable.
std::optional<uint64_t> available_host_memory();

// Fails naming `what`, its size and the memory available when `bytes` is more than that (or, where
// the available memory is unknown, more than 64 GiB).
void check_host_allocation(uint64_t bytes, std::string_view what, std::string_view advice);

}  // namespace megaqwen

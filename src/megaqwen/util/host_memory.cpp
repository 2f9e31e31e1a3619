#include "megaqwen/util/host_memory.h"

#include <fstream>
#include <sstream>
#include <string>

#include "megaqwen/util/error.h"

namespace megaqwen {

std::optional<uint64_t> available_host_memory() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key, unit;
    uint64_t kib = 0;
    if (fields >> key >> kib >> unit && key == "MemAvailable:" && unit == "kB") return kib * 1024;
  }
  return std::nullopt;
}

void check_host_allocation(uint64_t bytes, std::string_view what, std::string_view advice) {
  constexpr double kGiB = double(uint64_t(1) << 30);
  const std::optional<uint64_t> available = available_host_memory();
  const uint64_t limit = available ? *available : uint64_t(64) << 30;
  if (bytes <= limit) return;
  fail("{} needs {:.1f} GiB, but this machine has {:.1f} GiB {}; {}", what, double(bytes) / kGiB,
       double(limit) / kGiB, available ? "of memory available" : "as its assumed limit (no /proc/meminfo)", advice);
}

}  // namespace megaqwen

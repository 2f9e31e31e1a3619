// check_host_allocation: within what the machine has available, nothing; beyond it, an Error that
// names the allocation, both sizes and the advice.
#include "megaqwen/util/host_memory.h"

#include <gtest/gtest.h>

#include <string>

#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

TEST(HostMemory, ReadsMemAvailable) {
  const auto available = available_host_memory();
  ASSERT_TRUE(available.has_value()) << "/proc/meminfo has no MemAvailable line";
  EXPECT_GT(*available, uint64_t(16) << 20);
}

TEST(HostMemory, RefusesMoreThanIsAvailableWithTheNumbers) {
  EXPECT_NO_THROW(check_host_allocation(uint64_t(1) << 20, "a small buffer", "fine"));
  const uint64_t too_much = *available_host_memory() + (uint64_t(1) << 30);
  try {
    check_host_allocation(too_much, "a KV cache of 9000000 tokens", "ask for a smaller --ctx");
    FAIL() << "an allocation beyond the available memory was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("a KV cache of 9000000 tokens needs "), std::string::npos) << m;
    EXPECT_NE(m.find(" GiB of memory available; ask for a smaller --ctx"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace megaqwen

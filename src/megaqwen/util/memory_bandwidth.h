// Measures this machine's memory read bandwidth (all threads summing a buffer far larger than the
// caches), the ceiling that CPU decode speed is judged against.
#pragma once

#include <cstddef>

#include "megaqwen/util/thread_pool.h"

namespace megaqwen {

// Best of `repeats` passes over a `bytes`-sized buffer; GB/s (1e9 bytes per second).
double measure_read_bandwidth(ThreadPool& pool, size_t bytes = size_t(1) << 30, int repeats = 5);

}  // namespace megaqwen

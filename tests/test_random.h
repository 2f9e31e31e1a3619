// Seeded random test data shared by the CPU and GPU suites.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace megaqwen::test {

// n floats drawn uniformly from [lo, hi) by a generator seeded with `seed`: the same on every machine.
inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace megaqwen::test

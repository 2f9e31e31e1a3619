#include "megaqwen/util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <vector>

#include "megaqwen/util/bf16.h"

namespace megaqwen {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (size_t n : {0ul, 1ul, 5ul, 64ul, 1000ul, 1001ul}) {
      for (size_t grain : {1ul, 16ul}) {
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_for(n, [&](size_t b, size_t e) {
          EXPECT_LE(b, e);
          if (b < n) EXPECT_EQ(b % grain, 0u);
          for (size_t i = b; i < e; ++i) hits[i]++;
        }, grain);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i << " threads=" << threads;
      }
    }
  }
}

TEST(ThreadPool, ManyRoundsInARow) {
  ThreadPool pool(4);
  std::atomic<long> sum{0};
  for (int r = 0; r < 2000; ++r)
    pool.parallel_for(10, [&](size_t b, size_t e) { sum += long(e - b); });
  EXPECT_EQ(sum.load(), 20000);
}

TEST(Bf16, RoundTripAndRounding) {
  for (float v : {0.0f, 1.0f, -2.5f, 3.140625f, 0x1p-100f, 65536.0f}) EXPECT_EQ(bf16_to_f32(f32_to_bf16(v)), v);
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);  // halfway rounds to even (down)
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);  // halfway rounds to even (up)
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(-0.5f)), -0.5f);
}

}  // namespace
}  // namespace megaqwen

// model/gpu_layout.h's rearrangements on small matrices with distinct entries: where every value lands.
#include "megaqwen/model/gpu_layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "megaqwen/util/error.h"

namespace megaqwen {
namespace {

// The one-stage MLP's down^T: element (r, c) of a [rows, cols] matrix lands at (c, r); twice is the
// identity. Non-square, with a dimension of 1, and the empty matrix.
TEST(GpuLayout, TransposedMovesEveryElement) {
  for (auto [rows, cols] : {std::pair<size_t, size_t>{3, 5}, {5, 3}, {1, 7}, {7, 1}, {33, 64}, {0, 4}}) {
    std::vector<uint16_t> m(rows * cols);
    for (size_t i = 0; i < m.size(); ++i) m[i] = uint16_t(i * 7 + 1);
    const std::vector<uint16_t> t = transposed_bf16(m, rows, cols);
    ASSERT_EQ(t.size(), m.size());
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) ASSERT_EQ(t[c * rows + r], m[r * cols + c]) << rows << " x " << cols;
    EXPECT_EQ(transposed_bf16(t, cols, rows), m);
  }
}

TEST(GpuLayout, TransposedRefusesAShapeItsValuesDoNotHave) {
  const std::vector<uint16_t> m(12);
  EXPECT_THROW(transposed_bf16(m, 5, 3), Error);
  EXPECT_THROW(transposed_bf16(m, 3, 3), Error);
}

}  // namespace
}  // namespace megaqwen

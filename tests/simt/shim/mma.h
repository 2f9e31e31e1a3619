// Stand-in for <mma.h> (nvcuda::wmma) under the simt emulator: the 16x16x16 bf16 shapes with fp32
// accumulators that the tensor-core prefill attention uses. On a GPU a fragment is spread over the
// warp's 32 lanes in a layout the compiler owns; here every lane (fiber) holds the whole 16 x 16 tile
// in row-major order (num_elements = 256), loads read all of it and stores write all of it (every
// lane the same values). Code that touches fragment elements only through x[i] with a matching
// row-index fragment (load a matrix of row numbers into a fragment of the same type) is correct under
// both layouts, which is the point: the emulator cannot check a layout assumption, so the kernels
// make none.
#pragma once

#include "cuda_bf16.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator has the 16x16x16 shape only");
  static constexpr int num_elements = 256;
  using element_type = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, float, T>;
  element_type x[256];  // (row, col) at row * 16 + col, as fp32 (bf16 inputs are exact in fp32)
};

template <class Use, class T, class L>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, L>& f, float v) {
  for (float& e : f.x) e = v;
}

// matrix_a (rows m, cols k) and matrix_b (rows k, cols n) from bf16 memory.
template <class Use, class L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, L>& f, const __nv_bfloat16* p, unsigned ldm) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = __bfloat162float(std::is_same_v<L, row_major> ? p[r * ldm + c] : p[c * ldm + r]);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t l) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t l) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) (l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[r * 16 + c];
}

template <class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c) {
  float out[256];
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      float s = c.x[m * 16 + n];
      for (int k = 0; k < 16; ++k) s = fmaf(a.x[m * 16 + k], b.x[k * 16 + n], s);
      out[m * 16 + n] = s;
    }
  for (int i = 0; i < 256; ++i) d.x[i] = out[i];
}

}  // namespace nvcuda::wmma

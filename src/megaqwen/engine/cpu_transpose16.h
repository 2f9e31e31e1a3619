// A 16 x 16 transpose of 32-bit values in AVX-512 registers, used to pack matrix panels for the
// prefill kernels: fp32 weights widened from bf16 (cpu_matmul.cpp) and bf16 pairs left as 32-bit
// words (cpu_amx_matmul.cpp).
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>

namespace megaqwen::cpu {

// Stores the transpose of the block whose row j is r[j]: column i (lane i of every r[j]) goes to
// out + i * stride, as 16 consecutive values.
__attribute__((target("avx512f"))) inline void transpose16_store(const __m512 (&r)[16], float* out, int64_t stride) {
  __m512 t[16], u[16];
  // Per 128-bit lane l, holding columns 4l..4l+3: t[2i] = (r2i[0], r2i+1[0], r2i[1], r2i+1[1]).
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4i + e], lane l: rows 4i..4i+3 at column 4l + e.
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
    u[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  // Column 4l + e gathers lane l of u[e], u[4 + e], u[8 + e], u[12 + e]: a 4 x 4 transpose of lanes.
  for (int e = 0; e < 4; ++e) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88), v1 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xdd);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xdd);
    _mm512_storeu_ps(out + (0 + e) * stride, _mm512_shuffle_f32x4(v0, v2, 0x88));
    _mm512_storeu_ps(out + (4 + e) * stride, _mm512_shuffle_f32x4(v1, v3, 0x88));
    _mm512_storeu_ps(out + (8 + e) * stride, _mm512_shuffle_f32x4(v0, v2, 0xdd));
    _mm512_storeu_ps(out + (12 + e) * stride, _mm512_shuffle_f32x4(v1, v3, 0xdd));
  }
}

}  // namespace megaqwen::cpu

#endif

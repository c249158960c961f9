// One square block of an AVX2 vector's lanes transposed in registers (8 x 8 floats, 4 x 4 doubles): the packing of
// the weight gradient's columns (weight_grad_gemm.h) moves whole vectors instead of one element at a time. A copy:
// the same bits on every CPU.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace ssd {

// src (8, 8; leading dim ld) -> dst (8, 8; leading dim ldd): dst[j][i] = src[i][j]
inline void transpose_block(const float* src, int64_t ld, float* dst, int64_t ldd) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld);
  for (int i = 0; i < 8; i += 2) {  // t[i] = (r[i]0 r[i+1]0 r[i]1 r[i+1]1 | ..4 ..5), t[i+1] the odd pairs
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {  // r[i + c]: column c (and c + 4) of rows i..i+3
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_ps(dst + c * ldd, _mm256_permute2f128_ps(r[c], r[c + 4], 0x20));
    _mm256_storeu_ps(dst + (c + 4) * ldd, _mm256_permute2f128_ps(r[c], r[c + 4], 0x31));
  }
}

// src (4, 4; leading dim ld) -> dst (4, 4; leading dim ldd): dst[j][i] = src[i][j]
inline void transpose_block(const double* src, int64_t ld, double* dst, int64_t ldd) {
  const __m256d r0 = _mm256_loadu_pd(src), r1 = _mm256_loadu_pd(src + ld);
  const __m256d r2 = _mm256_loadu_pd(src + 2 * ld), r3 = _mm256_loadu_pd(src + 3 * ld);
  const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);  // columns 0, 2 / 1, 3 of rows 0-1
  const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
  _mm256_storeu_pd(dst, _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd(dst + ldd, _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd(dst + 2 * ldd, _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(dst + 3 * ldd, _mm256_permute2f128_pd(t1, t3, 0x31));
}

}  // namespace ssd

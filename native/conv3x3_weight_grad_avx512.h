// The AVX-512 tile of the direct 3x3 weight gradient (conv3x3_weight_grad.h): two of its AVX2 tiles at once, four
// output channels x 2 input channels x 3 kw. Each zmm accumulator holds two of the AVX2 tile's accumulators, one per
// 256-bit half (output channels o and o + 1 of a pair: dout rows joined, the input row broadcast to both halves), so
// every lane sums the same pixels in the same order, and the halves' lane sums take the AVX2 tile's tree: the two
// tiles give bit-identical results (tests/test_determinism.py). Compiled with a target attribute and called only
// where avx512_kernel_on().
#pragma once
#include <immintrin.h>

#include "conv3x3_weight_grad_tile.h"
#include "register_tile_avx512.h"

namespace ssd {

// 256-bit halves of a zmm: two joined, one broadcast to both, each taken back (float through the double forms,
// which AVX-512F has: the float ones need AVX-512DQ).
SSD_AVX512 inline __m512 join_halves(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}
SSD_AVX512 inline __m512d join_halves(__m256d lo, __m256d hi) {
  return _mm512_insertf64x4(_mm512_castpd256_pd512(lo), hi, 1);
}
SSD_AVX512 inline __m512 broadcast_half(const float* p) {
  return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))));
}
SSD_AVX512 inline __m512d broadcast_half(const double* p) { return _mm512_broadcast_f64x4(_mm256_loadu_pd(p)); }
SSD_AVX512 inline __m256 low_half(__m512 v) { return _mm512_castps512_ps256(v); }
SSD_AVX512 inline __m256d low_half(__m512d v) { return _mm512_castpd512_pd256(v); }
SSD_AVX512 inline __m256 high_half(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
SSD_AVX512 inline __m256d high_half(__m512d v) { return _mm512_extractf64x4_pd(v, 1); }

// total[0..11] and total[12..23] += what weight_grad_tile adds for the output pairs (d0, d0 + width) and
// (d0 + 2 width, d0 + 3 width), input channels in0 and in1, over `width` pixels of `rows` rows.
template <typename T>
SSD_AVX512 inline void weight_grad_tile_avx512(T* total, const T* d0, int64_t d_step, const T* in0, const T* in1,
                                               int64_t in_step, int width, int rows) {
  using S = Simd<T>;
  using V = typename Zmm<T>::V;
  constexpr int L = S::kLanes;
  V acc[2][6];  // [pair][input channel, kw]: each zmm the pair's two output channels, one per half
  for (auto& pair : acc)
    for (V& v : pair) v = Zmm<T>::zero();
  for (int r = 0; r < rows; ++r, d0 += d_step, in0 += in_step, in1 += in_step) {
    const T *d1 = d0 + width, *d2 = d1 + width, *d3 = d2 + width;
    for (int x = 0; x < width; x += L) {
      const V g01 = join_halves(S::load(d0 + x), S::load(d1 + x));
      const V g23 = join_halves(S::load(d2 + x), S::load(d3 + x));
#pragma GCC unroll 6
      for (int v = 0; v < 6; ++v) {
        const V in = broadcast_half((v < 3 ? in0 : in1) + x + v % 3);
        acc[0][v] = Zmm<T>::fma(g01, in, acc[0][v]);
        acc[1][v] = Zmm<T>::fma(g23, in, acc[1][v]);
      }
    }
  }
  for (int pair = 0; pair < 2; ++pair) {
    const V* a = acc[pair];
    add_lane_sums(total + 12 * pair, {low_half(a[0]), low_half(a[1]), low_half(a[2]), low_half(a[3]), low_half(a[4]),
                                      low_half(a[5]), high_half(a[0]), high_half(a[1]), high_half(a[2]),
                                      high_half(a[3]), high_half(a[4]), high_half(a[5])});
  }
}

// One group of rows' tiles over the output pairs of OC2 (even) channels, for one (input channel pair, kh): total
// advances by 12 per pair, as the AVX2 loop's does.
template <typename T>
SSD_AVX512 void weight_grad_rows_avx512(T* total, const T* grad_rows, int64_t d_step, int width, const T* in0,
                                        int padded, int64_t in_step, int OC2, int rows) {
  int o = 0;
  for (; o + 4 <= OC2; o += 4, total += 24)
    weight_grad_tile_avx512(total, grad_rows + int64_t(o) * width, d_step, in0, in0 + padded, in_step, width, rows);
  if (o < OC2) {
    const T* d0 = grad_rows + int64_t(o) * width;
    weight_grad_tile(total, d0, d0 + width, d_step, in0, in0 + padded, in_step, width, rows);
  }
}

}  // namespace ssd

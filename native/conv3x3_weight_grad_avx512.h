// The AVX-512 tile of the direct 3x3 weight gradient (conv3x3_weight_grad.h): two of its AVX2 tiles at once, four
// output channels x 2 input channels x 3 kw. Each zmm accumulator holds two of the AVX2 tile's accumulators, one per
// 256-bit half (output channels o and o + 1 of a pair: their dout rows interleaved in the buffer, the input row
// broadcast to both halves), so every lane sums the same pixels in the same order, and the halves' lane sums take the
// AVX2 tile's tree: the two tiles give bit-identical results (tests/test_determinism.py). Compiled with a target
// attribute and called only where avx512_kernel_on().
#pragma once
#include <immintrin.h>

#include <algorithm>

#include "conv3x3_weight_grad_tile.h"
#include "register_tile_avx512.h"

namespace ssd {

// 256-bit halves of a zmm: one broadcast to both, each taken back (float through the double forms, which AVX-512F
// has: the float ones need AVX-512DQ).
SSD_AVX512 inline __m512 broadcast_half(const float* p) {
  return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))));
}
SSD_AVX512 inline __m512d broadcast_half(const double* p) { return _mm512_broadcast_f64x4(_mm256_loadu_pd(p)); }
SSD_AVX512 inline __m256 low_half(__m512 v) { return _mm512_castps512_ps256(v); }
SSD_AVX512 inline __m256d low_half(__m512d v) { return _mm512_castpd512_pd256(v); }
SSD_AVX512 inline __m256 high_half(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
SSD_AVX512 inline __m256d high_half(__m512d v) { return _mm512_extractf64x4_pd(v, 1); }

// One dout row (W values) of output channel o -> its place in the AVX-512 tile's buffer: the rows of a pair of output
// channels (o even, o + 1) interleaved by AVX2 vectors, so that each zmm the tile loads holds both at the same pixels
// (dst: the pair's row, offset by L for o + 1; vector x / L of the row at dst + 2 x). Joining two ymm loads into a
// zmm instead took a shuffle-port instruction per pair per step, beside the tile's 12 FMAs.
template <typename T>
inline void interleave_dout_row(T* dst, const T* src, int W) {
  constexpr int L = Simd<T>::kLanes;
  for (int x = 0; x < W; x += L) std::copy_n(src + x, std::min(L, W - x), dst + 2 * x);
}

// For each input channel pair p (channels in0 + 2p padded and in0 + (2p + 1) padded): totals[p][0..11] and
// totals[p][12..23] += what weight_grad_tile adds for that pair and the output pairs at d0 and d0 + 2 width (each
// pair's rows interleaved: interleave_dout_row), over `width` pixels of `rows` rows. Two input pairs (24 accumulators)
// use each zmm of dout, which streams from L2, for 24 FMAs instead of 12 (with the interleaved rows: the kernel alone
// 0.90-0.93x the one-pair tile's time, one thread, Intel Xeon).
template <typename T, int InputPairs>
SSD_AVX512 inline void weight_grad_tile_avx512(T* const (&totals)[InputPairs], const T* d0, int64_t d_step,
                                               const T* in0, int padded, int64_t in_step, int width, int rows) {
  using S = Simd<T>;
  using V = typename Zmm<T>::V;
  constexpr int L = S::kLanes, Sums = 6 * InputPairs;
  V acc[2][Sums];  // [output pair][input channel, kw]: each zmm the output pair's two channels, one per half
  for (auto& pair : acc)
    for (V& v : pair) v = Zmm<T>::zero();
  for (int r = 0; r < rows; ++r, d0 += d_step, in0 += in_step) {
    const T* d23 = d0 + 2 * width;
    for (int x = 0; x < width; x += L) {
      const V g01 = Zmm<T>::load(d0 + 2 * x), g23 = Zmm<T>::load(d23 + 2 * x);
#pragma GCC unroll 12
      for (int v = 0; v < Sums; ++v) {
        const V in = broadcast_half(in0 + int64_t(v / 3) * padded + x + v % 3);
        acc[0][v] = Zmm<T>::fma(g01, in, acc[0][v]);
        acc[1][v] = Zmm<T>::fma(g23, in, acc[1][v]);
      }
    }
  }
  for (int p = 0; p < InputPairs; ++p)
    for (int pair = 0; pair < 2; ++pair) {
      typename S::V halves[12];  // the pair's first output channel's six sums, then its second's
      for (int i = 0; i < 6; ++i) {
        halves[i] = low_half(acc[pair][6 * p + i]);
        halves[6 + i] = high_half(acc[pair][6 * p + i]);
      }
      add_lane_sums(totals[p] + 12 * pair, halves);
    }
}

// One group of rows' tiles over the output pairs of OC2 (even) channels (their dout rows interleaved by pairs), for
// one kh and InputPairs pairs of input channels from in0: totals[p] advances by 12 per output pair, as the AVX2
// loop's total does for input pair p.
template <typename T, int InputPairs>
SSD_AVX512 void weight_grad_rows_avx512(T* const (&totals)[InputPairs], const T* grad_rows, int64_t d_step, int width,
                                        const T* in0, int padded, int64_t in_step, int OC2, int rows) {
  T* at[InputPairs];
  for (int p = 0; p < InputPairs; ++p) at[p] = totals[p];
  int o = 0;
  for (; o + 4 <= OC2; o += 4) {
    weight_grad_tile_avx512<T, InputPairs>(at, grad_rows + int64_t(o) * width, d_step, in0, padded, in_step, width,
                                           rows);
    for (T*& t : at) t += 24;
  }
  if (o < OC2) {
    const T* d0 = grad_rows + int64_t(o) * width;
    for (int p = 0; p < InputPairs; ++p) {
      const T* in = in0 + int64_t(2 * p) * padded;
      weight_grad_tile<T, /*Interleaved=*/true>(at[p], d0, d0 + Simd<T>::kLanes, d_step, in, in + padded, in_step,
                                                width, rows);
    }
  }
}

}  // namespace ssd

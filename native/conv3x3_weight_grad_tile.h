// The AVX2 register tile of the direct 3x3 weight gradient (conv3x3_weight_grad.h) and its lane sums, which the
// AVX-512 tile (conv3x3_weight_grad_avx512.h) shares so that the two give the same bits.
#pragma once
#include <immintrin.h>

#include "gemm_packed.h"

namespace ssd {

// The lane sums of twelve vectors added to total[0..11]: each vector's lanes summed by a fixed tree (pairs, then
// pairs of pairs, then the two halves). Summed here, a tile's totals are 12 values, not 12 vectors: kept as vectors
// (4.7 MB per thread at 128 channels and 150x150, added to on every row) they took two threads 1.19x the time.
inline void add_lane_sums(float* total, const __m256 (&v)[12]) {
  for (int i = 0; i < 12; i += 4) {
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(v[i], v[i + 1]), _mm256_hadd_ps(v[i + 2], v[i + 3]));
    const __m128 sums = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    _mm_storeu_ps(total + i, _mm_add_ps(_mm_loadu_ps(total + i), sums));
  }
}

inline void add_lane_sums(double* total, const __m256d (&v)[12]) {
  for (int i = 0; i < 12; i += 2) {
    const __m256d h = _mm256_hadd_pd(v[i], v[i + 1]);
    const __m128d sums = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
    _mm_storeu_pd(total + i, _mm_add_pd(_mm_loadu_pd(total + i), sums));
  }
}

// Rows of input and dout one tile call sums before its lane sums are taken: the twelve horizontal sums cost about
// as much as a 150-pixel row's FMAs (skipping them, a wrong result, took the whole backward of conv1_2 to conv2_2 at
// batch 4 on Zen 5 from 670 to 605 ms), so a group of rows pays them once. Four rows keep a thread's buffers of
// those rows (C x 6 input rows and OC x 4 dout rows) under 1 MB at 128 channels and 150x150.
constexpr int kWeightGradGroupRows = 4;

// One tile over a group of `rows` rows: total[v] (v = (o, c, kw), o and c in {0, 1}) += sum over rows r and x of
// d_o[r * d_step + x] * in_c[r * in_step + x + kw], x over `width` pixels (a multiple of the vector width; the rows
// are zero past their ends). Twelve accumulators, each lane the sum over the group's pixels in its lane, row by row,
// in pixel order from 0. Interleaved: the dout rows' vectors lie at d_o + 2 x (the AVX-512 layout of a pair of
// output channels: interleave_dout_row), not d_o + x.
template <typename T, bool Interleaved = false>
inline void weight_grad_tile(T* total, const T* d0, const T* d1, int64_t d_step, const T* in0, const T* in1,
                             int64_t in_step, int width, int rows) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int L = S::kLanes;
  V a00 = S::zero(), a01 = S::zero(), a02 = S::zero(), a10 = S::zero(), a11 = S::zero(), a12 = S::zero();
  V b00 = S::zero(), b01 = S::zero(), b02 = S::zero(), b10 = S::zero(), b11 = S::zero(), b12 = S::zero();
  // Each input vector is loaded once into a register: left to itself, GCC folded it into both FMAs as a memory
  // operand, two loads (often across a cache line) where one does.
  auto load = [](const T* p) {
    V v = S::load(p);
    asm("" : "+x"(v));
    return v;
  };
  for (int r = 0; r < rows; ++r, d0 += d_step, d1 += d_step, in0 += in_step, in1 += in_step)
    for (int x = 0; x < width; x += L) {  // a: output channel 0, b: output channel 1; then input channel, kw
      const int dx = Interleaved ? 2 * x : x;
      const V g0 = load(d0 + dx), g1 = load(d1 + dx);
      V v = load(in0 + x);
      a00 = S::fma(g0, v, a00), b00 = S::fma(g1, v, b00);
      v = load(in0 + x + 1);
      a01 = S::fma(g0, v, a01), b01 = S::fma(g1, v, b01);
      v = load(in0 + x + 2);
      a02 = S::fma(g0, v, a02), b02 = S::fma(g1, v, b02);
      v = load(in1 + x);
      a10 = S::fma(g0, v, a10), b10 = S::fma(g1, v, b10);
      v = load(in1 + x + 1);
      a11 = S::fma(g0, v, a11), b11 = S::fma(g1, v, b11);
      v = load(in1 + x + 2);
      a12 = S::fma(g0, v, a12), b12 = S::fma(g1, v, b12);
    }
  add_lane_sums(total, {a00, a01, a02, a10, a11, a12, b00, b01, b02, b10, b11, b12});
}

}  // namespace ssd

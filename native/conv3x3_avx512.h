// The AVX-512 tile of the direct 3x3 convolution (conv3x3.h), for CPUs that have AVX-512 (on Zen 5 each zmm FMA runs
// at full width: the AVX2 tile reached about half of oneDNN's rate there). The same register tile with vectors twice
// as wide, over twice the pixels: kConv3x3PixelsAvx512 output pixels x 2 zmm of output channels (32 float, 16
// double). Each accumulator lane is the AVX2 tile's chain of fused multiply-adds over the same steps, so the two give
// bit-identical results (tests/test_determinism.py). Compiled with a target attribute and called only where
// avx512_kernel_on().
#pragma once
#include <cstdint>

#include "register_tile_avx512.h"

namespace ssd {

constexpr int kConv3x3Pixels = 6;  // AVX2: 6 x 2 accumulators + 2 weight vectors + 1 broadcast, 15 of 16 registers

// acc (P pixels x 2 zmm of channels, pixel-major) = (first ? 0 : acc) + sum over the steps s in order of
// in[offsets[s] + i] (pixel i) x w[s * 2 * kLanes ...] (the step's two weight vectors).
template <typename T, int P>
SSD_AVX512 inline void conv3x3_tile_avx512(T* acc, bool first, const T* in, const int64_t* offsets, const T* w,
                                           int steps) {
  using Z = Zmm<T>;
  using V = typename Z::V;
  constexpr int L = Z::kLanes;
  V lo[P], hi[P];
#pragma GCC unroll 16
  for (int i = 0; i < P; ++i) {
    lo[i] = first ? Z::zero() : Z::load(acc + i * 2 * L);
    hi[i] = first ? Z::zero() : Z::load(acc + i * 2 * L + L);
  }
  for (int s = 0; s < steps; ++s, w += 2 * L) {
    const T* pixels = in + offsets[s];
    const V w0 = Z::load(w), w1 = Z::load(w + L);
#pragma GCC unroll 16
    for (int i = 0; i < P; ++i) {
      const V x = Z::broadcast(pixels + i);
      lo[i] = Z::fma(x, w0, lo[i]);
      hi[i] = Z::fma(x, w1, hi[i]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < P; ++i) Z::store(acc + i * 2 * L, lo[i]), Z::store(acc + i * 2 * L + L, hi[i]);
}

// Pixels of the AVX-512 tile: 12 x 2 accumulators + 2 weight vectors + 1 broadcast, 27 of 32 registers; each step's
// two weight vectors then feed 24 FMAs instead of 12. On an Intel Xeon (AVX-512, 2 cores), alternating call by call
// in one process against 6 pixels: the forward at batch 1 0.95-0.99x its time, the training step at batch 4
// 0.94-1.01x (median 0.97x over 5 rounds).
constexpr int kConv3x3PixelsAvx512 = 12;

// The last tile of a row, `count` (1 to P) pixels wide.
template <typename T, int P>
SSD_AVX512 inline void conv3x3_tail_avx512(int count, T* acc, bool first, const T* in, const int64_t* offsets,
                                           const T* w, int steps) {
  if (count == P) return conv3x3_tile_avx512<T, P>(acc, first, in, offsets, w, steps);
  if constexpr (P > 1) conv3x3_tail_avx512<T, P - 1>(count, acc, first, in, offsets, w, steps);
}

// The tiles of one output row for one block of input channels (conv3x3_row's loop, on this tile).
template <typename T>
SSD_AVX512 void conv3x3_row_avx512(T* acc, bool first, const T* in, const int64_t* offsets, const T* w, int steps,
                                   int width) {
  constexpr int P = kConv3x3PixelsAvx512, TC = 2 * Zmm<T>::kLanes;
  int x = 0;
  for (; x + P <= width; x += P) conv3x3_tile_avx512<T, P>(acc + x * TC, first, in + x, offsets, w, steps);
  if (x < width) conv3x3_tail_avx512<T, P - 1>(width - x, acc + x * TC, first, in + x, offsets, w, steps);
}

}  // namespace ssd

// 2-D max pooling (dilation 1) with torch's output-size rule, including ceil mode.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace ssd {

struct PoolGeometry {
  int C, H, W;
  int kernel, stride, pad;
  bool ceil_mode;
  // torch's pooling_output_shape: in ceil mode the last window must start inside the input or left padding.
  static int out_size(int in, int k, int s, int p, bool ceil) {
    const int span = in + 2 * p - (k - 1) - 1 + (ceil ? s - 1 : 0);
    int out = span / s + 1;
    if (ceil && (out - 1) * s >= in + p) --out;
    return out;
  }
  int OH() const { return out_size(H, kernel, stride, pad, ceil_mode); }
  int OW() const { return out_size(W, kernel, stride, pad, ceil_mode); }
};

// torch's CPU rule for the next element v of a window scanned in order: it replaces the best so far when greater,
// or when NaN (so ties keep the first maximum, and the last NaN wins). A select, not a branch: ties are common.
template <typename T>
inline bool pool_takes(T v, T best) {
  return (v > best) | (v != v);
}

// A 2x2, stride-2 pool's output row from input rows y0 and y0+1 of a float plane (W wide), eight outputs at a time:
// out[0, n), argmax[0, n) for the n = the first outputs whose windows fit in groups of eight; returns n. The four
// window elements are taken in scan order with pool_takes's rule, lane by lane.
inline int maxpool_2x2_row(float* out, int32_t* argmax, const float* plane, int W, int y0, int OW) {
  const __m256i lane_offsets = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  int ox = 0;
  for (; ox + 8 <= OW && 2 * ox + 16 <= W; ox += 8) {
    __m256 candidates[4];
    for (int dy = 0; dy < 2; ++dy) {
      const float* src = plane + int64_t(y0 + dy) * W + 2 * ox;
      const __m256 lo = _mm256_loadu_ps(src), hi = _mm256_loadu_ps(src + 8);
      // Even and odd columns of the sixteen, each back in column order.
      const __m256 even = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
      const __m256 odd = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
      candidates[2 * dy] = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), _MM_SHUFFLE(3, 1, 2, 0)));
      candidates[2 * dy + 1] = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), _MM_SHUFFLE(3, 1, 2, 0)));
    }
    const __m256i first = _mm256_add_epi32(_mm256_set1_epi32(y0 * W + 2 * ox), lane_offsets);
    const int32_t step[4] = {0, 1, W, W + 1};
    __m256 best = candidates[0];
    __m256 best_idx = _mm256_castsi256_ps(first);
    for (int c = 1; c < 4; ++c) {
      const __m256 v = candidates[c];
      const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      best = _mm256_blendv_ps(best, v, take);
      const __m256i idx = _mm256_add_epi32(first, _mm256_set1_epi32(step[c]));
      best_idx = _mm256_blendv_ps(best_idx, _mm256_castsi256_ps(idx), take);
    }
    _mm256_storeu_ps(out + ox, best);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(argmax + ox), _mm256_castps_si256(best_idx));
  }
  return ox;
}

// One input plane (H,W) -> out (OH,OW), argmax (OH,OW). K is the window size where it is known at compile time (0:
// read it from g), so the scan of a window inside the plane unrolls without bounds checks; windows that reach past
// the border (padding, ceil mode) take the checked scan. Both scan in the same order with the same rule. Starting
// from the window's first element equals starting from -inf with the first index: a first element of -inf
// leaves both the same, and a NaN there is taken either way.
template <int K, typename T>
void maxpool_plane(T* out, int32_t* argmax, const T* plane, const PoolGeometry& g) {
  const int k = K ? K : g.kernel, OH = g.OH(), OW = g.OW();
  for (int oy = 0; oy < OH; ++oy) {
    int ox = 0;
    if constexpr (K == 2 && std::is_same_v<T, float>)
      if (g.stride == 2 && g.pad == 0 && 2 * oy + 2 <= g.H)
        ox = maxpool_2x2_row(out, argmax, plane, g.W, 2 * oy, OW);
    out += ox, argmax += ox;
    for (; ox < OW; ++ox, ++out, ++argmax) {
      const int y0 = oy * g.stride - g.pad, x0 = ox * g.stride - g.pad;
      if (y0 >= 0 && x0 >= 0 && y0 + k <= g.H && x0 + k <= g.W) {
        int32_t best_idx = y0 * g.W + x0;
        T best = plane[best_idx];
        for (int dy = 0; dy < k; ++dy)
          for (int dx = dy == 0 ? 1 : 0; dx < k; ++dx) {
            const int32_t i = (y0 + dy) * g.W + x0 + dx;
            const T v = plane[i];
            const bool take = pool_takes(v, best);
            best = take ? v : best;
            best_idx = take ? i : best_idx;
          }
        *out = best;
        *argmax = best_idx;
        continue;
      }
      const int y1 = std::min(y0 + k, g.H), x1 = std::min(x0 + k, g.W);
      T best = -std::numeric_limits<T>::infinity();
      int32_t best_idx = std::max(y0, 0) * g.W + std::max(x0, 0);
      for (int y = std::max(y0, 0); y < y1; ++y)
        for (int x = std::max(x0, 0); x < x1; ++x) {
          const T v = plane[y * g.W + x];
          if (pool_takes(v, best)) {
            best = v;
            best_idx = y * g.W + x;
          }
        }
      *out = best;
      *argmax = best_idx;
    }
  }
}

// inp (C,H,W) -> out (C,OH,OW), argmax (C,OH,OW) index into the input plane.
// Ties keep the first maximum in scan order and NaN wins, as torch's CPU kernel does.
template <typename T>
void maxpool_forward(T* out, int32_t* argmax, const T* inp, const PoolGeometry& g) {
  const int64_t in_plane = int64_t(g.H) * g.W, out_plane = int64_t(g.OH()) * g.OW();
#pragma omp parallel for schedule(static)
  for (int c = 0; c < g.C; ++c) {
    T* o = out + c * out_plane;
    int32_t* a = argmax + c * out_plane;
    const T* plane = inp + c * in_plane;
    if (g.kernel == 2)  // SSD's pool1-4
      maxpool_plane<2>(o, a, plane, g);
    else if (g.kernel == 3)  // pool5
      maxpool_plane<3>(o, a, plane, g);
    else
      maxpool_plane<0>(o, a, plane, g);
  }
}

// dout (C,OH,OW), argmax (C,OH,OW) -> dinp (C,H,W) +=
template <typename T>
void maxpool_backward(T* dinp, const T* dout, const int32_t* argmax, const PoolGeometry& g) {
  const int64_t out_plane = int64_t(g.OH()) * g.OW();
#pragma omp parallel for schedule(static)
  for (int c = 0; c < g.C; ++c) {
    T* plane = dinp + int64_t(c) * g.H * g.W;
    for (int64_t o = c * out_plane; o < (c + 1) * out_plane; ++o) plane[argmax[o]] += dout[o];
  }
}

}  // namespace ssd

// 2-D max pooling (dilation 1) with torch's output-size rule, including ceil mode.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

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

// inp (C,H,W) -> out (C,OH,OW), argmax (C,OH,OW) index into the input plane.
// Ties keep the first maximum in scan order and NaN wins, as torch's CPU kernel does.
template <typename T>
void maxpool_forward(T* out, int32_t* argmax, const T* inp, const PoolGeometry& g) {
  const int OH = g.OH(), OW = g.OW();
#pragma omp parallel for schedule(static)
  for (int c = 0; c < g.C; ++c) {
    const T* plane = inp + int64_t(c) * g.H * g.W;
    for (int oy = 0; oy < OH; ++oy)
      for (int ox = 0; ox < OW; ++ox) {
        const int y0 = oy * g.stride - g.pad, x0 = ox * g.stride - g.pad;
        const int y1 = std::min(y0 + g.kernel, g.H), x1 = std::min(x0 + g.kernel, g.W);
        T best = -std::numeric_limits<T>::infinity();
        int32_t best_idx = std::max(y0, 0) * g.W + std::max(x0, 0);
        for (int y = std::max(y0, 0); y < y1; ++y)
          for (int x = std::max(x0, 0); x < x1; ++x) {
            const T v = plane[y * g.W + x];
            if (v > best || std::isnan(v)) {
              best = v;
              best_idx = y * g.W + x;
            }
          }
        const int64_t o = (int64_t(c) * OH + oy) * OW + ox;
        out[o] = best;
        argmax[o] = best_idx;
      }
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

// Head output layout: each source's conv output (A*D, H, W) becomes rows of (P, D), concatenated over the six
// sources in order. Row index = offset_k + (y*W + x)*A + a, as torchvision's SSDScoringHead flattens it.
#pragma once
#include <cstdint>

namespace ssd {

// conv (A*D,H,W) -> out rows [offset, offset + H*W*A) of (P,D), for one image
template <typename T>
void head_scatter_forward(T* out, const T* conv, int A, int D, int H, int W, int64_t offset) {
  for (int a = 0; a < A; ++a)
    for (int d = 0; d < D; ++d) {
      const T* plane = conv + int64_t(a * D + d) * H * W;
      for (int pix = 0; pix < H * W; ++pix) out[((offset + int64_t(pix) * A + a) * D) + d] = plane[pix];
    }
}

// dout rows [offset, offset + H*W*A) of (P,D) -> dconv (A*D,H,W), for one image
template <typename T>
void head_scatter_backward(T* dconv, const T* dout, int A, int D, int H, int W, int64_t offset) {
  for (int a = 0; a < A; ++a)
    for (int d = 0; d < D; ++d) {
      T* plane = dconv + int64_t(a * D + d) * H * W;
      for (int pix = 0; pix < H * W; ++pix) plane[pix] += dout[((offset + int64_t(pix) * A + a) * D) + d];
    }
}

}  // namespace ssd

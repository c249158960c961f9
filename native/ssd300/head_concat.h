// Head output layout: each source's conv output (A*D, H, W) becomes rows of (P, D), concatenated over the six
// sources in order. Row index = offset_k + (y*W + x)*A + a, as torchvision's SSDScoringHead flattens it.
#pragma once
#include <cstdint>

#include "faults.h"

namespace ssd {

// Row of the joined (B*P, D) output where image n's rows of source k (count_k of them) start: n*P + offset_k, as
// torchvision joins per image. The layer-major fault writes each source as one (batch x boxes) block instead.
inline int64_t head_first_row(int n, int B, int64_t P, int64_t offset_k, int64_t count_k) {
  return fault_on(Fault::LayerMajorConcat) ? B * offset_k + n * count_k : n * P + offset_k;
}

// conv (A*D,H,W) of one image -> out rows [offset, offset + H*W*A) of (rows, D)
template <typename T>
void head_scatter_forward(T* out, const T* conv, int A, int D, int H, int W, int64_t offset) {
  for (int a = 0; a < A; ++a)
    for (int d = 0; d < D; ++d) {
      const T* plane = conv + int64_t(a * D + d) * H * W;
      for (int pix = 0; pix < H * W; ++pix) out[((offset + int64_t(pix) * A + a) * D) + d] = plane[pix];
    }
}

// dout rows [offset, offset + H*W*A) of (rows, D) -> dconv (A*D,H,W) of one image +=
template <typename T>
void head_scatter_backward(T* dconv, const T* dout, int A, int D, int H, int W, int64_t offset) {
  for (int a = 0; a < A; ++a)
    for (int d = 0; d < D; ++d) {
      T* plane = dconv + int64_t(a * D + d) * H * W;
      for (int pix = 0; pix < H * W; ++pix) plane[pix] += dout[((offset + int64_t(pix) * A + a) * D) + d];
    }
}

}  // namespace ssd

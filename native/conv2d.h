// 2-D convolution, one image at a time, as tiled im2col + GEMM (forward: the packed column-consistent GEMM, so
// identical patches give identical outputs; backward: OpenBLAS). The column buffer covers one tile of output
// pixels, never the whole image, so scratch memory stays bounded at the 300x300 layers.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "gemm.h"
#include "gemm_packed.h"
#include "scratch.h"

namespace ssd {

struct ConvGeometry {
  int C, H, W;        // input channels and size
  int OC, KH, KW;     // output channels, kernel size
  int stride, pad, dilation;
  int OH() const { return (H + 2 * pad - dilation * (KH - 1) - 1) / stride + 1; }
  int OW() const { return (W + 2 * pad - dilation * (KW - 1) - 1) / stride + 1; }
  int patch() const { return C * KH * KW; }
  // A 1x1, stride 1, unpadded conv reads its input as the column matrix directly.
  bool is_pointwise() const { return KH == 1 && KW == 1 && stride == 1 && pad == 0; }
};

// Output pixels per tile, so that the column buffer holds at most kColumnBudget elements.
constexpr int64_t kColumnBudget = int64_t(1) << 21;
inline int conv_tile_pixels(const ConvGeometry& g) {
  const int64_t pixels = int64_t(g.OH()) * g.OW();
  return int(std::max<int64_t>(1, std::min<int64_t>(pixels, kColumnBudget / g.patch())));
}

// Output pixels [p0, p1) as runs along output rows: visit(y0, x0s, count, q) for each run, where y0 = oy*stride - pad
// and x0s = ox0*stride - pad locate the run's first window and q is the run's offset in the tile. Walking runs
// instead of dividing every pixel index made im2col/col2im several times faster at the 300x300 layers.
template <typename Visit>
void for_each_output_run(const ConvGeometry& g, int p0, int p1, Visit visit) {
  const int OW = g.OW();
  for (int p = p0; p < p1;) {
    const int oy = p / OW, ox0 = p % OW, count = std::min(OW - ox0, p1 - p);
    visit(oy * g.stride - g.pad, ox0 * g.stride - g.pad, count, p - p0);
    p += count;
  }
}

// inp (C,H,W) -> col (C*KH*KW, p1-p0) for output pixels [p0, p1); out-of-image taps read 0
template <typename T>
void im2col(T* col, const T* inp, const ConvGeometry& g, int p0, int p1) {
  const int n = p1 - p0;
#pragma omp parallel for schedule(static)
  for (int row = 0; row < g.patch(); ++row) {
    const int c = row / (g.KH * g.KW), kh = (row / g.KW) % g.KH, kw = row % g.KW;
    const T* plane = inp + int64_t(c) * g.H * g.W;
    T* dst = col + int64_t(row) * n;
    for_each_output_run(g, p0, p1, [&](int y0, int x0s, int count, int q) {
      const int iy = y0 + kh * g.dilation, x0 = x0s + kw * g.dilation;
      const bool row_inside = iy >= 0 && iy < g.H;
      const T* src = row_inside ? plane + int64_t(iy) * g.W : plane;
      for (int j = 0; j < count; ++j) {
        const int ix = x0 + j * g.stride;
        dst[q + j] = (row_inside && ix >= 0 && ix < g.W) ? src[ix] : T(0);
      }
    });
  }
}

// inp (C,H,W) -> the columns of output pixels [p0, p1) packed for gemm_packed: panels of kCols<T> pixels, each
// (C*KH*KW, kCols<T>) contiguous, pixels past p1 zero; out-of-image taps read 0. One thread fills a whole panel
// (sequential writes); where a panel's pixels are one run of an input row (stride 1, away from the border) a tap is
// a plain copy.
template <typename T>
void im2col_packed(T* packed, const T* inp, const ConvGeometry& g, int p0, int p1) {
  constexpr int NR = kCols<T>;
  const int OW = g.OW(), K = g.patch(), panels = int(round_up(p1 - p0, NR) / NR);
#pragma omp parallel for schedule(static)
  for (int panel = 0; panel < panels; ++panel) {
    int iy0[NR], ix0[NR];  // the top-left input pixel each output pixel's window starts at
    bool in_tile[NR];
    for (int j = 0; j < NR; ++j) {
      const int p = p0 + panel * NR + j;
      in_tile[j] = p < p1;
      iy0[j] = (p / OW) * g.stride - g.pad;
      ix0[j] = (p % OW) * g.stride - g.pad;
    }
    const bool one_run = g.stride == 1 && in_tile[NR - 1] && iy0[NR - 1] == iy0[0];
    T* dst = packed + int64_t(panel) * K * NR;
    for (int c = 0; c < g.C; ++c) {
      const T* plane = inp + int64_t(c) * g.H * g.W;
      for (int kh = 0; kh < g.KH; ++kh)
        for (int kw = 0; kw < g.KW; ++kw, dst += NR) {
          const int dy = kh * g.dilation, dx = kw * g.dilation;
          const int iy = iy0[0] + dy, ix = ix0[0] + dx;
          if (one_run && iy >= 0 && iy < g.H && ix >= 0 && ix + NR <= g.W) {
            std::copy(plane + int64_t(iy) * g.W + ix, plane + int64_t(iy) * g.W + ix + NR, dst);
            continue;
          }
          for (int j = 0; j < NR; ++j) {
            const int y = iy0[j] + dy, x = ix0[j] + dx;
            dst[j] = (in_tile[j] && y >= 0 && y < g.H && x >= 0 && x < g.W) ? plane[int64_t(y) * g.W + x] : T(0);
          }
        }
    }
  }
}

// col (C*KH*KW, p1-p0) -> grad_inp (C,H,W), adding each column entry back to the input pixel it was read from
template <typename T>
void col2im_add(T* grad_inp, const T* col, const ConvGeometry& g, int p0, int p1) {
  const int n = p1 - p0, taps = g.KH * g.KW;
  // One thread per input channel: the rows of one channel all write into the same plane. Within a plane the
  // additions run in tap order, then pixel order, whatever the thread count.
#pragma omp parallel for schedule(static)
  for (int c = 0; c < g.C; ++c) {
    T* plane = grad_inp + int64_t(c) * g.H * g.W;
    for (int t = 0; t < taps; ++t) {
      const int kh = t / g.KW, kw = t % g.KW;
      const T* src = col + int64_t(c * taps + t) * n;
      for_each_output_run(g, p0, p1, [&](int y0, int x0s, int count, int q) {
        const int iy = y0 + kh * g.dilation, x0 = x0s + kw * g.dilation;
        if (iy < 0 || iy >= g.H) return;
        T* dst = plane + int64_t(iy) * g.W;
        for (int j = 0; j < count; ++j) {
          const int ix = x0 + j * g.stride;
          if (ix >= 0 && ix < g.W) dst[ix] += src[q + j];
        }
      });
    }
  }
}

// inp (B,C,H,W), weight (OC,C,KH,KW), bias (OC) -> out (B,OC,OH,OW). The weights are packed once per call; each
// image is then computed alone, so a sample's result does not depend on the batch it came in.
template <typename T>
void conv2d_forward(T* out, const T* inp, int batch, const T* weight, const T* bias, const ConvGeometry& g,
                    GuardedScratch<T>& packed_weight, GuardedScratch<T>& packed_columns) {
  const int pixels = g.OH() * g.OW(), K = g.patch();
  const int64_t in_size = int64_t(g.C) * g.H * g.W, out_size = int64_t(g.OC) * pixels;
  pack_a(packed_weight.resize(packed_a_size<T>(g.OC, K)), weight, K, g.OC, K);
  const int tile = int(round_up(conv_tile_pixels(g), kCols<T>));
  T* columns = packed_columns.resize(packed_b_size<T>(tile, K));
  for (int n = 0; n < batch; ++n) {
    T* image_out = out + n * out_size;
    for (int p0 = 0; p0 < pixels; p0 += tile) {
      const int p1 = std::min(pixels, p0 + tile);
      im2col_packed(columns, inp + n * in_size, g, p0, p1);
      gemm_packed(g.OC, p1 - p0, K, packed_weight.data(), columns, image_out + p0, pixels);
    }
#pragma omp parallel for schedule(static)
    for (int oc = 0; oc < g.OC; ++oc) {
      T* row = image_out + int64_t(oc) * pixels;
      for (int p = 0; p < pixels; ++p) row[p] += bias[oc];
    }
  }
  packed_weight.check("conv2d_forward (packed weights)");
  packed_columns.check("conv2d_forward (packed im2col)");
}

// dout (OC,OH,OW), inp (C,H,W), weight (OC,C,KH,KW) -> grad_inp (C,H,W) +=, grad_weight (OC,C,KH,KW) +=,
// grad_bias (OC) +=. grad_inp may be null (the network input needs no gradient).
template <typename T>
void conv2d_backward(T* grad_inp, T* grad_weight, T* grad_bias, const T* dout, const T* inp, const T* weight,
                     const ConvGeometry& g, GuardedScratch<T>& scratch, GuardedScratch<T>& scratch_grad) {
  const int pixels = g.OH() * g.OW(), K = g.patch();
  for (int oc = 0; oc < g.OC; ++oc) {
    const T* row = dout + int64_t(oc) * pixels;
    T acc = 0;
    for (int p = 0; p < pixels; ++p) acc += row[p];
    grad_bias[oc] += acc;
  }
  if (g.is_pointwise()) {
    gemm(false, true, g.OC, K, pixels, T(1), dout, pixels, inp, pixels, T(1), grad_weight, K);
    if (grad_inp) gemm(true, false, K, pixels, g.OC, T(1), weight, K, dout, pixels, T(1), grad_inp, pixels);
    return;
  }
  const int tile = conv_tile_pixels(g);
  T* col = scratch.resize(int64_t(K) * tile);
  T* col_grad = scratch_grad.resize(int64_t(K) * tile);
  for (int p0 = 0; p0 < pixels; p0 += tile) {
    const int p1 = std::min(pixels, p0 + tile), n = p1 - p0;
    im2col(col, inp, g, p0, p1);
    gemm(false, true, g.OC, K, n, T(1), dout + p0, pixels, col, n, T(1), grad_weight, K);
    if (grad_inp) {
      gemm(true, false, K, n, g.OC, T(1), weight, K, dout + p0, pixels, T(0), col_grad, n);
      col2im_add(grad_inp, col_grad, g, p0, p1);
    }
  }
  scratch.check("conv2d_backward (im2col)");
  scratch_grad.check("conv2d_backward (column gradient)");
}

// The plain version the tests compare conv2d_forward against: a direct 7-deep loop, no im2col, no BLAS.
// inp (C,H,W), weight (OC,C,KH,KW), bias (OC) -> out (OC,OH,OW)
template <typename T>
void conv2d_forward_reference(T* out, const T* inp, const T* weight, const T* bias, const ConvGeometry& g) {
  const int OH = g.OH(), OW = g.OW();
  for (int oc = 0; oc < g.OC; ++oc)
    for (int oy = 0; oy < OH; ++oy)
      for (int ox = 0; ox < OW; ++ox) {
        T acc = 0;
        for (int c = 0; c < g.C; ++c)
          for (int kh = 0; kh < g.KH; ++kh)
            for (int kw = 0; kw < g.KW; ++kw) {
              const int iy = oy * g.stride - g.pad + kh * g.dilation;
              const int ix = ox * g.stride - g.pad + kw * g.dilation;
              if (iy < 0 || iy >= g.H || ix < 0 || ix >= g.W) continue;
              acc += inp[(int64_t(c) * g.H + iy) * g.W + ix] * weight[((int64_t(oc) * g.C + c) * g.KH + kh) * g.KW + kw];
            }
        out[(int64_t(oc) * OH + oy) * OW + ox] = acc + bias[oc];
      }
}

}  // namespace ssd

// Convolutions with a large share of taps in the padding, grouped by the taps each output pixel has inside the image
// (SSD300's conv6: 3x3, dilation 6, pad 6 on 19x19 maps, where 38% of the taps fall in the padding, and its input
// gradient's convolution). The im2col GEMM (conv2d.h) multiplies those taps' zeros like any other value; here the
// output pixels of the whole batch are gathered by their set of inside taps, and each set's pixels are multiplied
// only by its taps: the GEMM runs transposed, 2 kRows pixels (broadcast) by output channels (vectors), on the same
// register tiles (gemm_packed.h), each row panel's k steps the set's own. conv6's forward at batch 4 (Intel Xeon,
// 2 threads) took 0.80x the im2col GEMM's time on the AVX-512 tile and 0.66x on the AVX2 one.
//
// Rounding: per output element the same sequence as the im2col GEMM, less its products with padding: K in blocks of
// kKBlock, each block's products fused-multiply-added in k order from 0, block sums added in order. A product with a
// padding zero leaves a sum unchanged, so the results are the im2col GEMM's bit for bit (but for the sign of a zero
// sum after an underflow, and for an infinite or NaN weight, which a padding zero would have turned into NaN: as in
// the reference, whose convolution skips the padding too).
#pragma once
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <vector>

#include "conv_geometry.h"
#include "gemm_packed.h"
#include "scratch.h"
#include "weight_grad_gemm.h"

namespace ssd {

// On unless a test switches it off to hold the two paths to each other (bit-identical, as said above).
inline std::atomic<bool>& tap_sets_on() {
  static std::atomic<bool> on{true};
  return on;
}

// Dilated stride-1 convolutions (the only ones whose taps leave the image for whole bands of output rows and
// columns) with at least one product per output; ordinary 3x3 pad-1 layers lose a tap row only on their border rows.
inline bool tap_sets_apply(const ConvGeometry& g) {
  return tap_sets_on().load(std::memory_order_relaxed) && g.stride == 1 && g.dilation > 1 && g.patch() > 0 &&
         g.KH * g.KW <= 32;
}

// Output pixel (y, x)'s taps inside the image, as a bit mask (bit kh * KW + kw).
inline uint32_t inside_taps(const ConvGeometry& g, int y, int x) {
  uint32_t mask = 0;
  for (int kh = 0; kh < g.KH; ++kh)
    for (int kw = 0; kw < g.KW; ++kw) {
      const int iy = y - g.pad + kh * g.dilation, ix = x - g.pad + kw * g.dilation;
      if (iy >= 0 && iy < g.H && ix >= 0 && ix < g.W) mask |= 1u << (kh * g.KW + kw);
    }
  return mask;
}

// One set of inside taps: its pixels (n * pixels + p, in order) and, per K block, the offsets of its k's rows in a
// packed weight panel (k * kCols); and all its k's, block after block, as offsets in an input image from a pixel's
// window origin (channel 0, tap (0, 0)).
struct TapSet {
  std::vector<int64_t> pixels;
  std::vector<std::vector<int64_t>> block_rows;
  std::vector<int64_t> tap_offsets;
};

inline std::vector<TapSet> tap_sets(const ConvGeometry& g, int batch, int cols) {
  const int taps = g.KH * g.KW, K = g.patch(), OW = g.OW(), pixels = g.OH() * OW;
  std::map<uint32_t, TapSet> by_mask;
  for (int n = 0; n < batch; ++n)
    for (int p = 0; p < pixels; ++p) by_mask[inside_taps(g, p / OW, p % OW)].pixels.push_back(int64_t(n) * pixels + p);
  std::vector<TapSet> sets;
  for (auto& [mask, set] : by_mask) {
    for (int k0 = 0; k0 < K; k0 += kKBlock) {
      std::vector<int64_t> rows;
      for (int k = k0; k < std::min(K, k0 + kKBlock); ++k) {
        if (!(mask >> (k % taps) & 1u)) continue;
        rows.push_back(int64_t(k) * cols);
        const int c = k / taps, kh = k / g.KW % g.KH, kw = k % g.KW;
        set.tap_offsets.push_back((int64_t(c) * g.H + kh * g.dilation) * g.W + kw * g.dilation);
      }
      set.block_rows.push_back(std::move(rows));
    }
    sets.push_back(std::move(set));
  }
  return sets;
}

// Pixels per work item: 16 row panels, so that each K block of a column panel pair of the weights (2 x kc rows of
// kCols, 32 KB at most in float) is read from L2 once and used by eight tiles from L1. Measured on conv6's forward at
// batch 4 (Intel Xeon, AVX-512, 2 threads), against the im2col GEMM's 51-54 ms: one pair of row panels per item
// (every tile streaming its weights from L2) 60 ms, four pairs 44 ms, eight 41-43 ms, twelve 42-44 ms.
constexpr int kTapSetItemPixels = 16 * kRows;

// inp (B,C,H,W), weight (OC,C,KH,KW) -> out (B,OC,OH,OW) as conv2d_forward gives it (bias, ReLU or accumulate as
// `epilogue` says), where tap_sets_apply. A work item is kTapSetItemPixels pixels of one tap set: per K block it
// packs its pixels' values at the set's k's into row panels, then, per column panel pair of output channels, runs
// the tiles of its row panels, its sums kept in the item's rows of a (pixel, output channel) buffer; the finished
// rows are then written to the output planes.
template <typename T>
void conv2d_forward_tap_sets(T* out, const T* inp, int batch, const T* weight, const ConvGeometry& g,
                             const ConvEpilogue<T>& epilogue) {
  constexpr int NR = kCols<T>;
  const int K = g.patch(), OC = g.OC, pixels = g.OH() * g.OW(), OW = g.OW();
  const int panels = int(round_up(OC, NR) / NR), blocks = int(round_up(K, kKBlock) / kKBlock);
  const int64_t in_size = int64_t(g.C) * g.H * g.W, out_size = int64_t(OC) * pixels;
  // weight (OC, K) -> column panels of NR output channels, each (K, NR): row k of panel j at packed + j*K*NR + k*NR
  GuardedScratch<T> packed_weight;
  T* B = packed_weight.resize(int64_t(panels) * NR * K);
#pragma omp parallel for schedule(static)
  for (int j = 0; j < panels; ++j)
    pack_transposed_columns(B + int64_t(j) * K * NR, weight, K, j * NR, std::min(OC, (j + 1) * NR), 0, K);
  const std::vector<TapSet> sets = tap_sets(g, batch, NR);
  struct Item { int set, first; };  // first: the item's first pixel in its set's list
  std::vector<Item> items;
  for (int s = 0; s < int(sets.size()); ++s)
    for (int first = 0; first < int(sets[s].pixels.size()); first += kTapSetItemPixels) items.push_back({s, first});
  const int threads = omp_get_max_threads(), row_length = panels * NR;
  std::vector<GuardedScratch<T>> columns(threads), sums(threads);
  for (int t = 0; t < threads; ++t) {
    columns[t].resize(int64_t(kTapSetItemPixels) * std::min(K, kKBlock));
    sums[t].resize(int64_t(kTapSetItemPixels) * row_length);
  }
  const bool avx512 = avx512_kernel_on().load(std::memory_order_relaxed);
#pragma omp parallel for schedule(dynamic)
  for (int i = 0; i < int(items.size()); ++i) {
    const TapSet& set = sets[items[i].set];
    const int first = items[i].first, count = std::min<int>(kTapSetItemPixels, int(set.pixels.size()) - first);
    const int row_panels = (count + kRows - 1) / kRows;
    T* a = columns[omp_get_thread_num()].data();
    T* acc = sums[omp_get_thread_num()].data();  // (kTapSetItemPixels pixels, row_length output channels)
    const int64_t* pixel = set.pixels.data() + first;
    if (epilogue.accumulate)  // the old values first in every element's sequence of additions
      for (int r = 0; r < count; ++r)
        for (int oc = 0; oc < OC; ++oc)
          acc[int64_t(r) * row_length + oc] = out[pixel[r] / pixels * out_size + int64_t(oc) * pixels + pixel[r] % pixels];
    const int64_t* tap_offset = set.tap_offsets.data();
    for (int b = 0; b < blocks; ++b) {
      const std::vector<int64_t>& rows = set.block_rows[b];
      const int kc = int(rows.size());
      // the item's pixels' values at the block's k's -> row panels, each (kc, kRows); pixels past count read 0
      for (int r = 0; r < row_panels * kRows; ++r) {
        T* dst = a + (r / kRows) * int64_t(kc) * kRows + r % kRows;
        if (r >= count) {
          for (int s = 0; s < kc; ++s) dst[int64_t(s) * kRows] = T(0);
          continue;
        }
        const int p = int(pixel[r] % pixels);  // its window's origin, the set's taps all inside the image:
        const T* origin = inp + pixel[r] / pixels * in_size + int64_t(p / OW - g.pad) * g.W + p % OW - g.pad;
        for (int s = 0; s < kc; ++s) dst[int64_t(s) * kRows] = origin[tap_offset[s]];
      }
      tap_offset += kc;
      const bool first_block = b == 0 && !epilogue.accumulate;
      for (int j = 0; j < panels; j += avx512 ? 2 : 1) {
        const T* origins[2] = {B + int64_t(j) * K * NR, B + int64_t(j + 1) * K * NR};
        const DirectRows<T> source{origins, rows.data()};
        const int group = avx512 ? std::min(2, panels - j) : 1;
        for (int rp = 0; rp < row_panels; rp += avx512 ? 2 : 1) {
          const T* panel_a = a + int64_t(rp) * kc * kRows;
          const T* const pair[2] = {panel_a, panel_a + int64_t(kc) * kRows};
          const int rows_here = std::min(avx512 ? 2 * kRows : kRows, count - rp * kRows);
          T* c = acc + int64_t(rp) * kRows * row_length + int64_t(j) * NR;
          if (avx512)
            tile_avx512(rows_here > kRows, group, kc, pair, source, c, row_length, rows_here, group * NR, first_block);
          else
            register_tile(kc, panel_a, source, c, row_length, rows_here, NR, first_block);
        }
      }
    }
    for (int r = 0; r < count; ++r) {  // the finished pixels -> their output planes
      T* dst = out + pixel[r] / pixels * out_size + pixel[r] % pixels;
      const T* row = acc + int64_t(r) * row_length;
      for (int oc = 0; oc < OC; ++oc) {
        const T y = epilogue.bias ? row[oc] + epilogue.bias[oc] : row[oc];
        dst[int64_t(oc) * pixels] = epilogue.relu ? (y > T(0) ? y : T(0)) : y;
      }
    }
  }
  packed_weight.check("conv2d_forward_tap_sets (packed weights)");
  for (int t = 0; t < threads; ++t) {
    columns[t].check("conv2d_forward_tap_sets (pixel values)");
    sums[t].check("conv2d_forward_tap_sets (sums)");
  }
}

}  // namespace ssd

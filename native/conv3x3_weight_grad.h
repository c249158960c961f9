// The weight gradient of 3x3 convolutions with stride 1 and pad 1 on wide maps, as a direct kernel: grad_weight
// [oc][c][kh][kw] += sum over images and pixels of dout[oc][y][x] * inp[c][y + kh - 1][x + kw - 1]. The im2col
// GEMM (conv2d.h) copies every input value nine times into columns that OpenBLAS then packs again, and with 64 or
// 128 output channels it packs the whole dout tile again for every 128 columns of the gradient. This kernel works
// along rows: a register tile of 2 output channels x 2 input channels x 3 kw multiplies vectors of pixels of two
// dout rows by the same pixels of two input rows, shifted by kw (twelve accumulators). Measured against the GEMM
// (two threads, batch 1, alternating calls in one process), the whole backward of conv1_2 took 0.88x its time,
// conv2_1 0.95x, conv2_2 0.94x; the weight gradient alone 0.80x, 0.84x, 0.96x.
//
// Summation, per gradient element: within a group of up to kWeightGradGroupRows rows (a work item's block of rows
// cut from its first row), each vector lane sums its pixels row by row, in order from 0, and the lanes are added by
// a fixed tree; the group sums are added in order over the block; the blocks' sums are added to grad_weight in
// (image, block) order. Which thread ran a block does not matter.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "conv3x3.h"
#include "conv3x3_weight_grad_avx512.h"
#include "conv3x3_weight_grad_tile.h"
#include "conv_geometry.h"
#include "gemm_packed.h"
#include "scratch.h"

namespace ssd {

// Maps at least this wide: at 75x75 (conv3_1, 10 vectors per tile row) the tiles' fixed costs made this kernel
// 1.3x the GEMM's time; at 150 and 300 it took 0.80-0.96x (two threads, batch 1).
constexpr int kWeightGradMinWidth = 128;
// Output x input channels at most: a thread's sums and each work item's partial sums hold OC x C x 9 values.
constexpr int64_t kWeightGradMaxChannelPairs = 128 * 128;

// On unless a test switches the 3x3 kernels off (conv3x3_kernel_on) to hold them to the GEMM.
inline bool conv3x3_weight_grad_applies(const ConvGeometry& g) {
  return conv3x3_kernel_on().load(std::memory_order_relaxed) && g.KH == 3 && g.KW == 3 && g.stride == 1 &&
         g.pad == 1 && g.dilation == 1 && g.W >= kWeightGradMinWidth &&
         int64_t(g.C) * g.OC <= kWeightGradMaxChannelPairs;
}

// Row blocks per image, one work item each: blocks of about kWeightGradBlockRows rows, an even number of them where
// there is more than one (two threads at batch 1), fixed by the map's height alone.
constexpr int kWeightGradBlockRows = 32;
inline int weight_grad_row_blocks(int H) {
  const int blocks = std::max(1, H / kWeightGradBlockRows);
  return blocks > 1 && blocks % 2 ? blocks + 1 : blocks;
}

// dout (B,OC,H,W), inp (B,C,H,W) -> grad_weight (OC,C,3,3) += (where conv3x3_weight_grad_applies). A work item is one
// block of rows of one image, for every output and input channel, so each row of dout and of the input is read from
// memory once (items of output x input channel blocks over whole images, a first version, read them again for every
// block: 1.2-1.4x the time at 64 channels and 300x300). Per group of rows, its thread loads the input rows the group
// needs, every channel, zero-padded (one column left, the rest right: load_padded_row), and copies the group's dout
// rows into a buffer padded with zeros to whole vectors (for the AVX-512 tile, interleaved by output pairs; C x 6 and
// OC x 4 rows: 800 KB at 128 channels and 150x150; a (channel pair, kh)'s tiles sweep the OC x 4 dout rows, 311 KB of
// it, from L2). The tiles take channels in pairs: an odd count gets one more, all zeros (the first layer's 3 input
// channels: 0.5x the GEMM's time even so). The tiles' sums are kept in the AVX2 tiles' order, 12 each; the item's go
// to its own slot of `partials`, added to grad_weight in item order at the end.
template <typename T>
void conv3x3_weight_grad(T* grad_weight, const T* dout, const T* inp, int batch, const ConvGeometry& g) {
  using S = Simd<T>;
  constexpr int L = S::kLanes;
  const int C = g.C, OC = g.OC, H = g.H, W = g.W, width = int(round_up(W, L)), padded = int(round_up(width + 2, L));
  const int C2 = int(round_up(C, 2)), OC2 = int(round_up(OC, 2));  // with the all-zero channel of an odd count
  const int64_t plane = int64_t(H) * W, in_size = int64_t(C) * plane, out_size = int64_t(OC) * plane;
  const int64_t elements = int64_t(OC) * C * 9, tile_sums = int64_t(OC2) * C2 * 9, slot = int64_t(C2) * padded;
  const int blocks = weight_grad_row_blocks(H), items = batch * blocks, threads = omp_get_max_threads();
  const bool wide = avx512_kernel_on().load(std::memory_order_relaxed);  // the AVX-512 tile, bit-identical
  constexpr int R = kWeightGradGroupRows;
  const int64_t dout_slot = int64_t(OC2) * width;
  std::vector<GuardedScratch<T>> input_rows(threads), dout_rows(threads), totals(threads);
  for (int t = 0; t < threads; ++t) {
    std::fill_n(input_rows[t].resize((R + 2) * slot), (R + 2) * slot, T(0));  // an odd count's extra channel stays 0
    std::fill_n(dout_rows[t].resize(R * dout_slot), R * dout_slot, T(0));
    totals[t].resize(tile_sums);
  }
  GuardedScratch<T> partials;
  partials.resize(items * elements);
#pragma omp parallel for schedule(dynamic)
  for (int item = 0; item < items; ++item) {
    const int n = item / blocks, block = item % blocks;
    const int y0 = int(int64_t(block) * H / blocks), y1 = int(int64_t(block + 1) * H / blocks);
    const int t = omp_get_thread_num();
    T *rows = input_rows[t].data(), *grad_rows = dout_rows[t].data(), *sums = totals[t].data();
    std::fill_n(sums, tile_sums, T(0));
    const T* image = inp + n * in_size;
    const T* image_dout = dout + n * out_size;
    for (int ys = y0; ys < y1; ys += R) {  // a group of rows: input rows ys - 1 .. ys + count in slots 0 .. count + 1
      const int count = std::min(R, y1 - ys);
      for (int j = 0; j < count + 2; ++j) load_padded_row(rows + j * slot, padded, image, g, ys - 1 + j);
      for (int r = 0; r < count; ++r)
        for (int o = 0; o < OC; ++o) {
          const T* src = image_dout + (int64_t(o) * H + ys + r) * W;
          T* pair = grad_rows + r * dout_slot + int64_t(o / 2 * 2) * width;  // where the AVX2 tile's row o is, o even
          if (wide)
            interleave_dout_row(pair + o % 2 * L, src, W);
          else
            std::copy_n(src, W, pair + o % 2 * width);
        }
      // The tiles' totals, 12 each, in the AVX2 tiles' order: (input channel pair, kh, output pair). The AVX-512
      // tiles take two input pairs at once where there are two.
      const auto totals_of = [&](int c, int kh) { return sums + (int64_t(c / 2) * 3 + kh) * OC2 * 6; };
      for (int c = 0; c < C2; c += wide && c + 2 < C2 ? 4 : 2)
        for (int kh = 0; kh < 3; ++kh) {
          const T* in0 = rows + kh * slot + int64_t(c) * padded;
          if (wide && c + 2 < C2) {
            T* const totals[2] = {totals_of(c, kh), totals_of(c + 2, kh)};
            weight_grad_rows_avx512<T, 2>(totals, grad_rows, dout_slot, width, in0, padded, slot, OC2, count);
          } else if (wide) {
            T* const totals[1] = {totals_of(c, kh)};
            weight_grad_rows_avx512<T, 1>(totals, grad_rows, dout_slot, width, in0, padded, slot, OC2, count);
          } else {
            T* total = totals_of(c, kh);
            for (int o = 0; o < OC2; o += 2, total += 12) {
              const T* d0 = grad_rows + int64_t(o) * width;
              weight_grad_tile(total, d0, d0 + width, dout_slot, in0, in0 + padded, slot, width, count);
            }
          }
        }
    }
    // The tiles' totals -> partials[item] (OC,C,3,3)
    T* partial = partials.data() + item * elements;
    const T* total = sums;
    for (int c = 0; c < C2; c += 2)
      for (int kh = 0; kh < 3; ++kh)
        for (int o = 0; o < OC2; o += 2)
          for (int v = 0; v < 12; ++v, ++total) {  // v = (output, input channel of the pair, kw)
            const int oc = o + v / 6, ic = c + v / 3 % 2;
            if (oc < OC && ic < C) partial[((int64_t(oc) * C + ic) * 3 + kh) * 3 + v % 3] = *total;
          }
  }
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < elements; ++e) {
    T sum = grad_weight[e];
    for (int item = 0; item < items; ++item) sum += partials.data()[item * elements + e];
    grad_weight[e] = sum;
  }
  partials.check("conv3x3_weight_grad (item sums)");
  for (int t = 0; t < threads; ++t) {
    input_rows[t].check("conv3x3_weight_grad (input rows)");
    dout_rows[t].check("conv3x3_weight_grad (dout rows)");
    totals[t].check("conv3x3_weight_grad (tile sums)");
  }
}

}  // namespace ssd

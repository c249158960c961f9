// 3x3 convolutions with stride 1 and pad 1 of kConv3x3ChannelBlock to kConv3x3MaxChannels input channels (VGG's
// 300x300 and 150x150 layers and conv3_1, and the input gradients of the first three), as a direct convolution: a
// register tile of kConv3x3Pixels output pixels along a row x two vectors of output channels, each step
// broadcasting one input value per pixel and loading two vectors of weights (output channels contiguous). The
// im2col GEMM (conv2d.h) broadcasts weights and loads 16 pixels of an input row per step instead; with 64 or 128
// output channels its tile reads each input row 11-22 times from L2, often across two cache lines. Measured in
// one process against it, call by call (Zen 3, two threads, batch 1): conv1_2 0.85-0.87x its time, conv2_1
// 0.88-0.91x, conv2_2 0.87-0.91x, conv3_1 0.97x; at 256 input channels no faster, so those stay on the GEMM.
//
// Column consistency (gemm_packed.h): every output element is the chain of fused multiply-adds over (channel, kh,
// kw) in that order, starting from 0, wherever it lies: out-of-image taps read zeros from the padded rows and go
// through the same steps, and the partial sums kept between blocks of input channels are stored as they are. The
// result depends neither on the thread count, nor on the batch, nor on the number of output channels.
#pragma once
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "conv3x3_avx512.h"
#include "conv_geometry.h"
#include "gemm_packed.h"
#include "scratch.h"

namespace ssd {

constexpr int kConv3x3ChannelBlock = 8;   // input channels per pass along an output row (16 measured 7% slower)
constexpr int kConv3x3MaxChannels = 128;  // input channels; at 256 this kernel was no faster than the GEMM
// Pixels per sweep: its input rows, sums and weights stay in L1 (20 KB; 30 KB with the AVX-512 tile's 32 channels).
constexpr int kConv3x3Segment = 96;

// Output channels of a tile: two vectors, of AVX2 (16 float, 8 double) or, where the packed GEMM runs its AVX-512
// tile (avx512_kernel_on), of AVX-512 (32, 16: conv3x3_avx512.h).
template <typename T>
int conv3x3_outputs() { return 2 * (avx512_kernel_on().load(std::memory_order_relaxed) ? Zmm<T>::kLanes : Simd<T>::kLanes); }

// Whether conv2d_forward takes this kernel where it applies (on unless a test switches it off to hold it to the
// im2col GEMM, which rounds differently: K blocks of kKBlock).
inline std::atomic<bool>& conv3x3_kernel_on() {
  static std::atomic<bool> on{true};
  return on;
}

// Only the input channels decide, not the output channels: a source's loc and conf head convs, computed as one
// convolution (ssd300/ssd_model_impl.h), must take the same kernel as each of them on its own. Below 8 input channels
// (the first layer's 3) the GEMM stays: there this kernel took 1.8x its time.
inline bool conv3x3_applies(const ConvGeometry& g) {
  return conv3x3_kernel_on().load(std::memory_order_relaxed) && g.KH == 3 && g.KW == 3 && g.stride == 1 &&
         g.pad == 1 && g.dilation == 1 && g.C >= kConv3x3ChannelBlock && g.C <= kConv3x3MaxChannels;
}

// acc (P pixels x 2 * Simd<T>::kLanes channels, pixel-major) = (first ? 0 : acc) + sum over the steps s in order of
// in[offsets[s] + i] (pixel i) x w[s * 2 * Simd<T>::kLanes ...] (the step's weight vectors).
template <typename T, int P>
inline void conv3x3_tile(T* acc, bool first, const T* in, const int64_t* offsets, const T* w, int steps) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int L = S::kLanes;
  V lo[P], hi[P];
#pragma GCC unroll 8
  for (int i = 0; i < P; ++i) {
    lo[i] = first ? S::zero() : S::load(acc + i * 2 * L);
    hi[i] = first ? S::zero() : S::load(acc + i * 2 * L + L);
  }
  for (int s = 0; s < steps; ++s, w += 2 * L) {
    const T* pixels = in + offsets[s];
    const V w0 = S::load(w), w1 = S::load(w + L);
#pragma GCC unroll 8
    for (int i = 0; i < P; ++i) {
      const V x = S::broadcast(pixels + i);
      lo[i] = S::fma(x, w0, lo[i]);
      hi[i] = S::fma(x, w1, hi[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < P; ++i) S::store(acc + i * 2 * L, lo[i]), S::store(acc + i * 2 * L + L, hi[i]);
}

// The tiles of one output row for one block of input channels: `width` pixels in tiles of kConv3x3Pixels, the
// last one narrower.
template <typename T>
void conv3x3_row(T* acc, bool first, const T* in, const int64_t* offsets, const T* w, int steps, int width) {
  constexpr int P = kConv3x3Pixels, TC = 2 * Simd<T>::kLanes;
  int x = 0;
  for (; x + P <= width; x += P) conv3x3_tile<T, P>(acc + x * TC, first, in + x, offsets, w, steps);
  T* a = acc + x * TC;
  switch (width - x) {
    case 5: return conv3x3_tile<T, 5>(a, first, in + x, offsets, w, steps);
    case 4: return conv3x3_tile<T, 4>(a, first, in + x, offsets, w, steps);
    case 3: return conv3x3_tile<T, 3>(a, first, in + x, offsets, w, steps);
    case 2: return conv3x3_tile<T, 2>(a, first, in + x, offsets, w, steps);
    case 1: return conv3x3_tile<T, 1>(a, first, in + x, offsets, w, steps);
    default: return;
  }
}

// weight (OC,C,3,3) -> packed (groups of TC output channels, C, 9, TC), the last group padded with zero weights: a
// tile's step reads its TC output channels' weights contiguously.
template <typename T>
void pack_conv3x3_weights(T* packed, const T* weight, const ConvGeometry& g, int TC) {
  const int K = g.patch(), groups = (g.OC + TC - 1) / TC;
#pragma omp parallel for schedule(static)
  for (int oc = 0; oc < groups * TC; ++oc)
    for (int k = 0; k < K; ++k)
      packed[(int64_t(oc / TC) * K + k) * TC + oc % TC] = oc < g.OC ? weight[int64_t(oc) * K + k] : T(0);
}

// Input row y of every channel -> slot: channel c's row at slot + c * stride holds a zero, the row's W values, then
// zeros up to stride (at least W + 2). Rows outside the image are zeros.
template <typename T>
void load_padded_row(T* slot, int stride, const T* image, const ConvGeometry& g, int y) {
  for (int c = 0; c < g.C; ++c) {
    T* row = slot + int64_t(c) * stride;
    row[0] = T(0);
    if (y < 0 || y >= g.H) std::fill(row + 1, row + 1 + g.W, T(0));
    else std::copy_n(image + (int64_t(c) * g.H + y) * g.W, g.W, row + 1);
    std::fill(row + 1 + g.W, row + stride, T(0));
  }
}

// Input row y into its slot of a band of three (slot (y + 3) % 3, row -1 in slot 2; slots slot_size apart).
template <typename T>
void load_band_row(T* band, int64_t slot_size, int stride, const T* image, const ConvGeometry& g, int y) {
  load_padded_row(band + int64_t((y + 3) % 3) * slot_size, stride, image, g, y);
}

// inp (B,C,H,W), weight (OC,C,3,3) -> out (B,OC,H,W), finished as `epilogue` says (conv2d_forward's contract,
// where conv3x3_applies). A work item is one output row of one image. Its thread keeps the three input rows it
// reads, padded, in a band in cache (C x 3 x (W+2): 232 KB at 64 channels and 300x300), and a thread's items are
// consecutive rows, so each new row loads one input row into the band. Per tile's TC output channels, per
// segment of the row and per block of input channels, the tiles sweep the segment, their sums kept in the thread's
// row buffer; the finished row is then written to those channels' planes (bias and ReLU, or added in).
template <typename T>
void conv3x3_forward(T* out, const T* inp, int batch, const T* weight, const ConvGeometry& g,
                     const ConvEpilogue<T>& epilogue) {
  constexpr int CB = kConv3x3ChannelBlock;
  const bool wide = avx512_kernel_on().load(std::memory_order_relaxed);
  const int TC = conv3x3_outputs<T>(), H = g.H, W = g.W, PW = W + 2, groups = (g.OC + TC - 1) / TC, K = g.patch();
  const auto row = wide ? conv3x3_row_avx512<T> : conv3x3_row<T>;
  const int64_t plane = int64_t(H) * W, in_size = int64_t(g.C) * plane, out_size = int64_t(g.OC) * plane;
  const int64_t slot_size = int64_t(g.C) * PW;
  GuardedScratch<T> packed;
  pack_conv3x3_weights(packed.resize(int64_t(groups) * TC * K), weight, g, TC);
  // offsets[r * K + k], step k = (channel, kh, kw), for output rows y with y % 3 == r: where the step's input lies
  // in the band, from the window corner of the row's first pixel (input row y + kh - 1 is in slot (r + kh + 2) % 3).
  std::vector<int64_t> offsets(3 * K);
  for (int r = 0; r < 3; ++r)
    for (int k = 0; k < K; ++k)
      offsets[r * K + k] = (r + k % 9 / 3 + 2) % 3 * slot_size + int64_t(k / 9) * PW + k % 3;
  const int threads = omp_get_max_threads();
  std::vector<GuardedScratch<T>> bands(threads), rows(threads);
  for (int t = 0; t < threads; ++t) bands[t].resize(3 * slot_size), rows[t].resize(int64_t(W) * TC);
  const int64_t items = int64_t(batch) * H;
#pragma omp parallel
  {
    T* band = bands[omp_get_thread_num()].data();
    T* acc = rows[omp_get_thread_num()].data();
    int64_t previous = -1;  // this thread's last item: the band holds its rows
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item) {
      const int n = int(item / H), y = int(item % H);
      const T* image = inp + n * in_size;
      if (previous >= 0 && item == previous + 1 && y > 0) {
        load_band_row(band, slot_size, PW, image, g, y + 1);
      } else {
        for (int row = y - 1; row <= y + 1; ++row) load_band_row(band, slot_size, PW, image, g, row);
      }
      previous = item;
      const int64_t* row_offsets = offsets.data() + (y % 3) * K;
      for (int group = 0; group < groups; ++group) {
        const T* w = packed.data() + int64_t(group) * K * TC;
        for (int x0 = 0; x0 < W; x0 += kConv3x3Segment)
          for (int c0 = 0; c0 < g.C; c0 += CB) {
            const int k0 = c0 * 9, steps = std::min(CB, g.C - c0) * 9;
            row(acc + x0 * TC, c0 == 0, band + x0, row_offsets + k0, w + int64_t(k0) * TC, steps,
                std::min(kConv3x3Segment, W - x0));
          }
        for (int o = 0; o < std::min(TC, g.OC - group * TC); ++o) {
          const int oc = group * TC + o;
          T* dst = out + n * out_size + oc * plane + int64_t(y) * W;
          const T* sums = acc + o;  // pixel x's sum at sums[x * TC]
          if (epilogue.accumulate) {
            for (int x = 0; x < W; ++x) dst[x] += sums[x * TC];
            continue;
          }
          const T bias = epilogue.bias ? epilogue.bias[oc] : T(0);
          for (int x = 0; x < W; ++x) {
            const T value = epilogue.bias ? sums[x * TC] + bias : sums[x * TC];
            dst[x] = epilogue.relu ? (value > T(0) ? value : T(0)) : value;
          }
        }
      }
    }
  }
  packed.check("conv3x3_forward (packed weights)");
  for (int t = 0; t < threads; ++t) {
    bands[t].check("conv3x3_forward (input band)");
    rows[t].check("conv3x3_forward (row sums)");
  }
}

}  // namespace ssd

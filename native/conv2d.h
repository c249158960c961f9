// 2-D convolution as im2col + GEMM, never over a whole image at once, so scratch memory stays bounded at the 300x300
// layers. Forward: the packed column-consistent GEMM (identical patches give identical outputs), fed im2col rows
// packed per chunk of output pixels and K block (or, for up to kDirectMaxRows output channels, read in place where a
// panel of pixels lies inside the image); 3x3, stride-1, pad-1 convolutions of 8 to 128 input channels run as direct
// convolutions instead (conv3x3.h). Backward: for stride 1 the input gradient is the transposed
// convolution on the same packed GEMM; the weight gradient (and a strided input gradient) run on OpenBLAS (the
// weight gradient on AVX-512 CPUs on the packed GEMM: weight_grad_gemm.h), one tile of output pixels at a time, but
// for the 3x3 convolutions of the wide maps: a direct kernel (conv3x3_weight_grad.h).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "conv3x3.h"
#include "conv3x3_weight_grad.h"
#include "conv_geometry.h"
#include "conv_tap_sets.h"
#include "gemm.h"
#include "gemm_packed.h"
#include "lane_sum.h"
#include "scratch.h"
#include "weight_grad_gemm.h"

namespace ssd {

// Output pixels per tile of the backward's column buffer: at most kColumnBudget elements, in tiles of equal size (a
// 38x38 map with 4608-element patches went as 455+455+455+79 pixels; the short tile's GEMM ran far below the others'
// rate and every tile reads and writes the whole weight gradient).
constexpr int64_t kColumnBudget = int64_t(1) << 21;
inline int conv_tile_pixels(const ConvGeometry& g) {
  const int64_t pixels = int64_t(g.OH()) * g.OW();
  const int64_t largest = std::max<int64_t>(1, std::min<int64_t>(pixels, kColumnBudget / g.patch()));
  const int64_t tiles = (pixels + largest - 1) / largest;
  return int((pixels + tiles - 1) / tiles);
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
      T* out = dst + q;
      if (iy < 0 || iy >= g.H) {
        std::fill(out, out + count, T(0));
        return;
      }
      const T* src = plane + int64_t(iy) * g.W;
      if (g.stride == 1) {  // zeros left and right of the image, one copy between (a check per pixel was 3% of a step)
        const int j0 = std::clamp(-x0, 0, count), j1 = std::clamp(g.W - x0, j0, count);
        std::fill(out, out + j0, T(0));
        std::copy(src + x0 + j0, src + x0 + j1, out + j0);
        std::fill(out + j1, out + count, T(0));
        return;
      }
      for (int j = 0; j < count; ++j) {
        const int ix = x0 + j * g.stride;
        out[j] = ix >= 0 && ix < g.W ? src[ix] : T(0);
      }
    });
  }
}

// Output columns per work item of the forward: at most 16 register-tile panels, so one K block of their packed
// columns (kKBlock x 256 floats, 256 KiB: half of Zen 3's L2, a quarter of Zen 4's) stays in L2 while every row panel
// of the weights sweeps it. Each chunk streams the whole packed weights once: chunks of 16 panels instead of 8 halve
// that traffic (SSD300 training step B4 on Zen 4, alternating processes: 5.11, 5.37, 5.44, 4.99, 5.79 s with 8;
// 4.75, 4.76, 4.89, 4.48, 4.66 s with 16; 24 and 32 panels were no better beyond the noise).
constexpr int kForwardChunkPanels = 16;

// inp (C,H,W) -> rows [k0, k1) of the im2col matrix (row k = channel k/(KH*KW), tap k%(KH*KW)) for output pixels
// [p0, p1), at most kForwardChunkPanels panels of them, packed for gemm_packed: panels of kCols<T> pixels, each
// (k1-k0, kCols<T>) contiguous, pixels past p1 zero; out-of-image taps read 0. The chunk is first cut into runs
// along output rows (a panel that crosses a row end holds two), so that a tap of a run reads one input row:
// checked once per run for the row and, off the border, copied without a check per pixel. Row by row across the
// panels, so the reads walk along input rows.
//
// Panels the tiles read in place (direct[panel] not null: direct_panel_origin) are skipped.
template <typename T>
void pack_columns(T* packed, const T* inp, const ConvGeometry& g, int k0, int k1, int p0, int p1,
                  const T* const* direct) {
  using S = Simd<T>;
  constexpr int NR = kCols<T>;
  const int rows = k1 - k0, panels = int(round_up(p1 - p0, NR) / NR), taps = g.KH * g.KW;
  // Run r: `count` pixels at packed offset `at` (panel * rows * NR + column), its first window at (y0, x0).
  struct Run { int64_t at; int count, y0, x0; };
  Run runs[kForwardChunkPanels * NR];  // every run holds at least one pixel
  int run_count = 0;
  for (int panel = 0; panel < panels; ++panel) {
    if (direct[panel]) continue;
    const int q0 = p0 + panel * NR;
    for_each_output_run(g, q0, std::min(p1, q0 + NR), [&](int y0, int x0, int count, int q) {
      runs[run_count++] = {int64_t(panel) * rows * NR + q, count, y0, x0};
    });
  }
  const int tail = (p1 - p0) % NR;  // pixels in a last, partial panel; its columns past them stay zero
  T* tail_row = packed + int64_t(panels - 1) * rows * NR;
  int c = k0 / taps, kh = k0 % taps / g.KW, kw = k0 % g.KW;
  for (int k = 0; k < rows; ++k) {
    const T* plane = inp + int64_t(c) * g.H * g.W;
    const int dy = kh * g.dilation, dx = kw * g.dilation;
    T* packed_row = packed + int64_t(k) * NR;
    for (int r = 0; r < run_count; ++r) {
      const Run& run = runs[r];
      T* dst = packed_row + run.at;
      const int y = run.y0 + dy, x = run.x0 + dx;
      if (y < 0 || y >= g.H) {
        std::fill(dst, dst + run.count, T(0));
        continue;
      }
      const T* src = plane + int64_t(y) * g.W;
      if (g.stride == 1 && x >= 0 && x + run.count <= g.W) {
        if (run.count == NR) {  // two vector moves (std::copy of these 64 bytes was a call to memmove)
          S::store(dst, S::load(src + x));
          S::store(dst + S::kLanes, S::load(src + x + S::kLanes));
        } else {
          for (int j = 0; j < run.count; ++j) dst[j] = src[x + j];
        }
        continue;
      }
      for (int j = 0; j < run.count; ++j) {
        const int xj = x + j * g.stride;
        dst[j] = xj >= 0 && xj < g.W ? src[xj] : T(0);
      }
    }
    if (tail) std::fill(tail_row + int64_t(k) * NR + tail, tail_row + int64_t(k) * NR + NR, T(0));
    if (++kw == g.KW && (kw = 0, ++kh == g.KH)) kh = 0, ++c;
  }
}

// Whether conv2d_forward reads interior column panels in place (on unless a test switches it off to hold the two
// paths to each other: they give bit-identical results).
inline std::atomic<bool>& direct_columns_on() {
  static std::atomic<bool> on{true};
  return on;
}

// The panel of kCols<T> output pixels starting at pixel q0 is read in place by the GEMM when the convolution has
// stride 1, the panel lies in one output row and every tap of every pixel falls inside the image: row k of its im2col
// block is then kCols<T> consecutive input values, at the returned origin (channel 0, tap 0 of the first pixel)
// plus offsets[k] (direct_tap_offsets). nullptr where the panel must be packed.
template <typename T>
const T* direct_panel_origin(const T* inp, const ConvGeometry& g, int q0) {
  constexpr int NR = kCols<T>;
  const int OW = g.OW(), oy = q0 / OW, ox = q0 % OW, y = oy - g.pad, x = ox - g.pad;
  const bool inside = g.stride == 1 && ox + NR <= OW && y >= 0 && y + (g.KH - 1) * g.dilation < g.H && x >= 0 &&
                      x + NR - 1 + (g.KW - 1) * g.dilation < g.W;
  return inside ? inp + int64_t(y) * g.W + x : nullptr;
}

// Output channels up to which conv2d_forward reads interior panels in place. Packing costs a copy per column
// element, shared by M / kRows row panels; reading in place costs cache and TLB misses on every use (a tile's rows
// come from C channel planes). Measured at batch 1, packed/in place: 64 channels at 300x300 46.2/42.8 ms, 128 at
// 150x150 39.2/37.7, 256 at 75x75 34.9/36.1, 512 at 38x38 40.4/43.5.
constexpr int kDirectMaxRows = 128;

// -> offsets (K): row k of the im2col matrix (channel k/(KH*KW), tap k%(KH*KW)) lies at a window origin + offsets[k]
inline std::vector<int64_t> direct_tap_offsets(const ConvGeometry& g) {
  std::vector<int64_t> offsets(g.patch());
  for (int k = 0; k < g.patch(); ++k) {
    const int c = k / (g.KH * g.KW), kh = k / g.KW % g.KH, kw = k % g.KW;
    offsets[k] = int64_t(c) * g.H * g.W + int64_t(kh) * g.dilation * g.W + kw * g.dilation;
  }
  return offsets;
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

// Chunks of output pixels per image in the forward: at most kForwardChunkPanels panels each, and enough chunks that
// batch x chunks is a multiple of the thread count where the map allows (an odd number of chunks of a batch-1 map on
// two threads leaves one thread idle at the end). Chunks are cut between pairs of panels: chunk c starts at panel
// forward_chunk_start(c), sizes differ by one pair at most (equal chunks of 8 panels and a short last one left a
// thread waiting at the 38x38 layers: 7% of their time in the OpenMP barrier), and only an image's last chunk can hold
// an odd number of panels, which the AVX-512 GEMM runs as a tile of one panel at half its rate (chunks of 15 panels
// at the 38x38 layers: 3% of their time).
inline int forward_chunks(int panels, int batch, int threads) {
  const int pairs = (panels + 1) / 2;
  int chunks = (pairs + kForwardChunkPanels / 2 - 1) / (kForwardChunkPanels / 2);
  while (int64_t(batch) * chunks % threads != 0 && chunks < pairs) ++chunks;
  return chunks;
}
inline int forward_chunk_start(int chunk, int chunks, int panels) {
  return std::min(panels, int(int64_t(chunk) * ((panels + 1) / 2) / chunks) * 2);
}

// Whether conv2d_forward runs this convolution on a kernel that packs the weights its own way (the direct 3x3
// kernel, the tap sets), so that neither a kept packing nor a packing without the weights serves it.
inline bool packs_own_weights(const ConvGeometry& g) { return conv3x3_applies(g) || tap_sets_apply(g); }

// inp (B,C,H,W), weight (OC,C,KH,KW) -> out (B,OC,OH,OW), finished as `epilogue` says. The weights are packed into
// packed_weight once per call, unless `weight_packed`: it already holds these weights packed by an earlier call (a
// caller whose weights have not changed since). A work item is one image's chunk of output pixels (and, when there are fewer items than threads, a
// share of the output channels): per K block its im2col rows are packed into the thread's own buffer, in cache,
// and multiplied at once, never a whole-image column buffer; then bias and ReLU are applied while the chunk is in
// cache. Every output element takes the same path wherever it lies (gemm_packed.h), so a sample's result depends
// neither on its batch nor on the thread count.
template <typename T>
void conv2d_forward(T* out, const T* inp, int batch, const T* weight, const ConvGeometry& g,
                    GuardedScratch<T>& packed_weight, const ConvEpilogue<T>& epilogue, bool weight_packed = false) {
  if (packs_own_weights(g)) {
    if (!weight && g.OC > 0)
      throw std::logic_error("conv2d_forward: this kernel needs the weights, not only their packing");
    return tap_sets_apply(g) ? conv2d_forward_tap_sets(out, inp, batch, weight, g, epilogue)
                             : conv3x3_forward(out, inp, batch, weight, g, epilogue);
  }
  constexpr int NR = kCols<T>;
  const int pixels = g.OH() * g.OW(), K = g.patch(), M = g.OC;
  const int64_t in_size = int64_t(g.C) * g.H * g.W, out_size = int64_t(M) * pixels;
  if (weight_packed && packed_weight.size() != packed_a_size<T>(M, K))
    throw std::logic_error("conv2d_forward: the kept packed weights do not fit this layer");
  const T* A = weight_packed ? packed_weight.data() : pack_a(packed_weight.resize(packed_a_size<T>(M, K)), weight, K, M, K);
  const int threads = omp_get_max_threads();
  const int panels = int(round_up(pixels, NR) / NR), chunks = forward_chunks(panels, batch, threads);
  const int row_panels = int(round_up(M, kRows) / kRows);
  const int row_groups = batch * chunks >= threads ? 1 : std::min(row_panels, threads);
  const int panels_per_group = (row_panels + row_groups - 1) / row_groups;
  const bool direct = g.stride == 1 && M <= kDirectMaxRows && direct_columns_on().load(std::memory_order_relaxed);
  const std::vector<int64_t> offsets = direct ? direct_tap_offsets(g) : std::vector<int64_t>();
  std::vector<GuardedScratch<T>> columns(threads);
  const int chunk_pixels = ((panels + 1) / 2 + chunks - 1) / chunks * 2 * NR;  // the largest chunk
  for (auto& buffer : columns) buffer.resize(packed_b_size<T>(chunk_pixels, std::min(K, kKBlock)));
#pragma omp parallel for schedule(static)
  for (int item = 0; item < batch * chunks * row_groups; ++item) {
    const int n = item / (chunks * row_groups), chunk = item / row_groups % chunks, group = item % row_groups;
    const int p0 = forward_chunk_start(chunk, chunks, panels) * NR;
    const int p1 = std::min(pixels, forward_chunk_start(chunk + 1, chunks, panels) * NR);
    const int rp0 = group * panels_per_group, rp1 = std::min(row_panels, rp0 + panels_per_group);
    T* packed = columns[omp_get_thread_num()].data();
    const T* image = inp + n * in_size;
    T* image_out = out + n * out_size;
    const T* origins[kForwardChunkPanels] = {};
    for (int panel = 0; direct && p0 + panel * NR < p1; ++panel)
      origins[panel] = direct_panel_origin(image, g, p0 + panel * NR);
    for (int k0 = 0; k0 < K; k0 += kKBlock) {
      const int k1 = std::min(K, k0 + kKBlock);
      pack_columns(packed, image, g, k0, k1, p0, p1, origins);
      const BlockColumns<T> block{packed, origins, direct ? offsets.data() + k0 : nullptr};
      gemm_packed_block(M, rp0, rp1, K, k0, k1, A, p0, p1, block, image_out, pixels, epilogue.accumulate);
    }
    if (!epilogue.bias && !epilogue.relu) continue;
    for (int m = rp0 * kRows; m < std::min(M, rp1 * kRows); ++m) {
      T* row = image_out + int64_t(m) * pixels;
      for (int p = p0; p < p1; ++p) {
        const T y = epilogue.bias ? row[p] + epilogue.bias[m] : row[p];
        row[p] = epilogue.relu ? (y > T(0) ? y : T(0)) : y;
      }
    }
  }
  packed_weight.check("conv2d_forward (packed weights)");
  for (const auto& buffer : columns) buffer.check("conv2d_forward (packed im2col)");
}

// Scratch a layer's backward reuses: im2col columns and their gradients (one tile of output pixels), and the
// flipped weights of the input gradient's convolution with their packing.
template <typename T>
struct ConvBackwardScratch {
  GuardedScratch<T> columns, column_grads, flipped_weight, packed_weight;
  WeightGradScratch<T> weight_grad;
};

// For stride 1 the input gradient is itself a convolution: of dout, padded by dilation*(KH-1) - pad, with the
// weights flipped in space and input and output channels swapped. It then runs on the forward's packed GEMM, with
// no column-gradient buffer and no scatter back into the image.
inline bool input_grad_is_convolution(const ConvGeometry& g) {
  return g.stride == 1 && g.KH == g.KW && g.dilation * (g.KH - 1) >= g.pad;
}

// weight (OC,C,KH,KW) -> flipped (C,OC,KH,KW): flipped[c][oc][kh][kw] = weight[oc][c][KH-1-kh][KW-1-kw]
template <typename T>
void flip_weights(T* flipped, const T* weight, const ConvGeometry& g) {
  const int taps = g.KH * g.KW;
#pragma omp parallel for schedule(static)
  for (int c = 0; c < g.C; ++c)
    for (int oc = 0; oc < g.OC; ++oc) {
      const T* src = weight + (int64_t(oc) * g.C + c) * taps;
      T* dst = flipped + (int64_t(c) * g.OC + oc) * taps;
      for (int t = 0; t < taps; ++t) dst[t] = src[taps - 1 - t];
    }
}

// weight (OC,C,KH,KW) -> packed: the flipped weights (flip_weights) as pack_a packs them (C rows of OC*KH*KW), read
// from the weights in place, the same values. Writing the flipped copy (up to 19 MB, at conv6) and packing it in a
// second pass: on an Intel Xeon (AVX-512, 2 cores), alternating call by call in one process, the training step at
// batch 4 took 0.99x (rounds 0.96-1.00) the time without it. Panel by panel, k in order: for one oc a panel's kRows
// input channels' taps lie together in the weights.
template <typename T>
const T* pack_flipped_weights(T* packed, const T* weight, const ConvGeometry& g) {
  const int taps = g.KH * g.KW, K = g.OC * taps, panels = int(round_up(g.C, kRows) / kRows);
#pragma omp parallel for schedule(static)
  for (int panel = 0; panel < panels; ++panel) {
    T* dst = packed + int64_t(panel) * K * kRows;
    for (int oc = 0; oc < g.OC; ++oc)
      for (int t = 0; t < taps; ++t, dst += kRows)
        for (int r = 0; r < kRows; ++r) {
          const int c = panel * kRows + r;
          dst[r] = c < g.C ? weight[(int64_t(oc) * g.C + c) * taps + taps - 1 - t] : T(0);
        }
  }
  return packed;
}

// grad_weight (OC, K) += dout (OC, n; leading dim ld_dout) x col (K, n)^T: on the packed GEMM
// where packed_weight_grad_on (weight_grad_gemm.h), else OpenBLAS.
template <typename T>
void add_weight_grad(T* grad_weight, const T* dout, int ld_dout, const T* col, int n, int OC, int K,
                     WeightGradScratch<T>& scratch) {
  if (packed_weight_grad_on().load(std::memory_order_relaxed))
    return weight_grad_gemm(grad_weight, dout, ld_dout, col, OC, K, n, scratch);
  gemm(false, true, OC, K, n, T(1), dout, ld_dout, col, n, T(1), grad_weight, K);
}

// dout (B,OC,OH,OW), inp (B,C,H,W), weight (OC,C,KH,KW) -> grad_inp (B,C,H,W) +=, grad_weight (OC,C,KH,KW) +=,
// grad_bias (OC) +=, images added in batch order. grad_inp may be null (the network input needs no gradient), and
// grad_bias (a convolution without bias, followed by BatchNorm), and grad_weight (computed in another call: the SSD
// heads' two convolutions of one map together); weight is read only for grad_inp.
template <typename T>
void conv2d_backward(T* grad_inp, T* grad_weight, T* grad_bias, const T* dout, const T* inp, int batch,
                     const T* weight, const ConvGeometry& g, ConvBackwardScratch<T>& scratch) {
  const int pixels = g.OH() * g.OW(), K = g.patch();
  const int64_t in_size = int64_t(g.C) * g.H * g.W, out_size = int64_t(g.OC) * pixels;
#pragma omp parallel for schedule(static)
  for (int oc = 0; oc < (grad_bias ? g.OC : 0); ++oc)
    for (int n = 0; n < batch; ++n) grad_bias[oc] += lane_sum(dout + n * out_size + int64_t(oc) * pixels, pixels);
  // A pointwise layer's too: on OpenBLAS (held to AVX2 where OPENBLAS_CORETYPE says so) conv7's input gradient at
  // batch 4 took 1.35x the time it takes here (Zen 5, 26.1 against 19.3 ms for the whole backward).
  const bool input_grad_by_convolution = grad_inp && input_grad_is_convolution(g);
  if (input_grad_by_convolution) {
    const int pad = g.dilation * (g.KH - 1) - g.pad;
    const ConvGeometry transposed{g.OC, g.OH(), g.OW(), g.C, g.KH, g.KW, 1, pad, g.dilation};
    const ConvEpilogue<T> add_to_grad{nullptr, false, /*accumulate=*/true};
    if (packs_own_weights(transposed)) {
      flip_weights(scratch.flipped_weight.resize(int64_t(g.OC) * K), weight, g);
      conv2d_forward(grad_inp, dout, batch, scratch.flipped_weight.data(), transposed, scratch.packed_weight,
                     add_to_grad);
      scratch.flipped_weight.check("conv2d_backward (flipped weights)");
    } else {
      pack_flipped_weights(scratch.packed_weight.resize(packed_a_size<T>(g.C, g.OC * g.KH * g.KW)), weight, g);
      conv2d_forward(grad_inp, dout, batch, static_cast<const T*>(nullptr), transposed, scratch.packed_weight,
                     add_to_grad, /*weight_packed=*/true);
    }
  }
  if (grad_weight && conv3x3_weight_grad_applies(g)) {  // its input gradient, if wanted, was the convolution above
    conv3x3_weight_grad(grad_weight, dout, inp, batch, g);
    return;
  }
  const bool input_grad_by_columns = grad_inp && !input_grad_by_convolution && !g.is_pointwise();
  if (!grad_weight && !input_grad_by_columns) return;
  const int tile = conv_tile_pixels(g);
  T* col = g.is_pointwise() || !grad_weight ? nullptr : scratch.columns.resize(int64_t(K) * tile);
  T* col_grad = input_grad_by_columns ? scratch.column_grads.resize(int64_t(K) * tile) : nullptr;
  for (int n = 0; n < batch; ++n) {
    const T* image_dout = dout + n * out_size;
    const T* image_inp = inp + n * in_size;
    T* image_grad_inp = grad_inp && !input_grad_by_convolution ? grad_inp + n * in_size : nullptr;
    if (g.is_pointwise()) {  // its input gradient, a 1x1 convolution with the transposed weights, ran above
      add_weight_grad(grad_weight, image_dout, pixels, image_inp, pixels, g.OC, K, scratch.weight_grad);
      continue;
    }
    for (int p0 = 0; p0 < pixels; p0 += tile) {
      const int p1 = std::min(pixels, p0 + tile), count = p1 - p0;
      if (grad_weight) {
        im2col(col, image_inp, g, p0, p1);
        add_weight_grad(grad_weight, image_dout + p0, pixels, col, count, g.OC, K, scratch.weight_grad);
      }
      if (image_grad_inp) {
        gemm(true, false, K, count, g.OC, T(1), weight, K, image_dout + p0, pixels, T(0), col_grad, count);
        col2im_add(image_grad_inp, col_grad, g, p0, p1);
      }
    }
  }
  scratch.columns.check("conv2d_backward (im2col)");
  scratch.column_grads.check("conv2d_backward (column gradient)");
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

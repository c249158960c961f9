// The weight gradient of a convolution from its im2col columns, on the forward's packed GEMM (gemm_packed.h) instead
// of OpenBLAS: grad_weight (OC, K) += dout (OC, n) x col (K, n)^T, the sum over a tile's n output pixels. OpenBLAS
// runs the kernels it loaded with (openblas.h), and a machine that sets OPENBLAS_CORETYPE=Haswell holds it to AVX2
// on an AVX-512 CPU; the packed GEMM runs its AVX-512 tile wherever the CPU has it and the native switch allows.
//
// Summation, per gradient element: the pixels in blocks of kKBlock, each block's products fused-multiply-added in
// pixel order from 0 and then added to grad_weight, blocks in order (the packed GEMM's sequence, with every block
// accumulated); tiles and images add in the caller's order. Work items are chunks of gradient columns, so neither the
// thread count nor the register tile's width (AVX2 or AVX-512: bit-identical) changes a result.
#pragma once
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "gemm_packed.h"
#include "scratch.h"
#include "transpose_block.h"

namespace ssd {

// Whether conv2d_backward takes this path for the weight gradients it would give OpenBLAS: on where the CPU has
// AVX-512 (unless SSD_NATIVE_ISA=avx2: kernel_environment.h). On AVX2 OpenBLAS stays, faster there: on Zen 5 held to
// AVX2 the backward of eight SSD300 layers at batch 1 took 299-311 ms with this path on the AVX2 tile, 258-263 ms on
// OpenBLAS's Haswell kernels; on the AVX-512 tile 200-217 ms (OpenBLAS's SkylakeX kernels: 195-200 ms).
inline std::atomic<bool>& packed_weight_grad_on() {
  static std::atomic<bool> on{cpu_has_avx512()};
  return on;
}

// Gradient columns per work item: 8 column panels (128 float columns). Each item streams the whole packed dout tile
// once, so fewer, wider items read less; these keep 9 items or more at K = 1152 (conv3_1), so that two threads
// finish within a ninth of each other.
constexpr int kWeightGradChunkPanels = 8;

template <typename T>
struct WeightGradScratch {
  GuardedScratch<T> packed_dout;
  std::vector<GuardedScratch<T>> packed_columns;  // per thread: one item's column panels, every block of pixels
};

// Rows [n0, n1) of col (K, n; leading dim ld) over the pixels [q0, q1) -> the packed GEMM's column panels: panel i
// (columns n0 + i * kCols .. of the gradient) holds (q1 - q0, kCols) contiguous, columns past n1 zero. Whole groups of
// a vector's lanes of columns go as square blocks transposed in registers (element by element, this packing was 3% of
// a training step on AVX-512).
template <typename T>
void pack_transposed_columns(T* packed, const T* col, int64_t ld, int n0, int n1, int q0, int q1) {
  constexpr int NR = kCols<T>, L = Simd<T>::kLanes;
  const int pixels = q1 - q0;
  for (int n = n0; n < int(n0 + round_up(n1 - n0, NR)); n += L) {
    T* dst = packed + int64_t((n - n0) / NR) * pixels * NR + (n - n0) % NR;  // lanes [n, n + L) of the panel's rows
    const T* src = col + int64_t(n) * ld + q0;
    int q = 0;
    if (n + L <= n1)
      for (; q + L <= pixels; q += L) transpose_block(src + q, ld, dst + int64_t(q) * NR, NR);
    for (; q < pixels; ++q)
      for (int j = 0; j < L; ++j) dst[int64_t(q) * NR + j] = n + j < n1 ? src[int64_t(j) * ld + q] : T(0);
  }
}

// dout (OC, n; leading dim ld_dout), col (K, n) -> grad_weight (OC, K) += dout x col^T. A work item packs its chunk
// of columns for every block of pixels at once, then runs the blocks for one pair of row panels after another: the
// pair's rows of grad_weight (2 kRows x the chunk's columns: 6 KB in float) stay in L1 from block to block, where
// sweeping every row panel per block sent all of grad_weight (9.4 MB at conv4_3) through L3 once per block. Each
// element's blocks still add in pixel order: bit-identical to that order. On an Intel Xeon (AVX-512, 2 cores),
// alternating call by call in one process, the training step at batch 4 took 0.95-0.99x the time it took then.
template <typename T>
void weight_grad_gemm(T* grad_weight, const T* dout, int ld_dout, const T* col, int OC, int K, int n,
                      WeightGradScratch<T>& scratch) {
  constexpr int NR = kCols<T>, chunk_columns = kWeightGradChunkPanels * NR, kRowPanelsPerPass = 2;
  const T* A = pack_a(scratch.packed_dout.resize(packed_a_size<T>(OC, n)), dout, ld_dout, OC, n);
  const int row_panels = int(round_up(OC, kRows) / kRows), chunks = (K + chunk_columns - 1) / chunk_columns;
  const int64_t block_size = packed_b_size<T>(chunk_columns, kKBlock);  // one block of pixels' packed columns
  const int blocks = (n + kKBlock - 1) / kKBlock, threads = omp_get_max_threads();
  if (int(scratch.packed_columns.size()) < threads) scratch.packed_columns.resize(threads);
  for (int t = 0; t < threads; ++t) scratch.packed_columns[t].resize(blocks * block_size);
#pragma omp parallel for schedule(dynamic)
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int n0 = chunk * chunk_columns, n1 = std::min(K, n0 + chunk_columns);
    T* packed = scratch.packed_columns[omp_get_thread_num()].data();
    for (int block = 0; block < blocks; ++block)
      pack_transposed_columns(packed + block * block_size, col, n, n0, n1, block * kKBlock,
                              std::min(n, (block + 1) * kKBlock));
    for (int rp = 0; rp < row_panels; rp += kRowPanelsPerPass)
      for (int block = 0; block < blocks; ++block)
        gemm_packed_block(OC, rp, std::min(row_panels, rp + kRowPanelsPerPass), n, block * kKBlock,
                          std::min(n, (block + 1) * kKBlock), A, n0, n1, BlockColumns<T>{packed + block * block_size},
                          grad_weight, K, /*accumulate=*/true);
  }
  scratch.packed_dout.check("weight_grad_gemm (packed dout)");
  for (int t = 0; t < threads; ++t) scratch.packed_columns[t].check("weight_grad_gemm (packed columns)");
}

}  // namespace ssd

// C (M,N) = A (M,K) * B (K,N) from packed panels, with an FMA register kernel (AVX2, or AVX-512 where the CPU has it):
// the forward convolution's GEMM.
//
// Column consistency: every element of C is computed by the same sequence of roundings wherever it lies, so two
// identical image patches give bit-identical outputs, as in the reference's convolution (OpenBLAS rounds some
// 16-column blocks differently from their neighbours, and max-pool then routed gradients to a different element of
// a tied window). The sequence: K is cut into blocks of kKBlock; within a block the products are accumulated by
// fused multiply-adds in k order starting from 0, and the block sums are added to C in block order
// (C = sum_0, then C = C + sum_1, ...). Row and column tails are padded with zeros in the packed panels and go
// through the same register kernel, and the caller splits the work by whole columns (or whole row panels), so the
// result does not depend on the position of a column, the chunk it falls in or the thread count. The AVX-512 kernel
// performs the same sequence per element with wider vectors, so the two kernels agree bit for bit.
//
// Blocking (Zen 3: 32 KiB L1d and 512 KiB L2 per core; Zen 4: 1 MiB L2): a register tile of kRows x kCols(T) (AVX2)
// or 2 kRows x 2 kCols(T) (AVX-512); one kRows x kKBlock micro-panel of A (two on AVX-512) stays in L1 while it sweeps
// the column panels of one K block of B (kKBlock x kCols each, together in L2; the caller packs that block:
// conv2d.h).
#pragma once
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "gemm_columns.h"
#include "register_tile_avx512.h"

namespace ssd {

template <typename T>
struct Simd;

template <>
struct Simd<float> {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
};

template <>
struct Simd<double> {
  using V = __m256d;
  static constexpr int kLanes = 4;
  static V zero() { return _mm256_setzero_pd(); }
  static V load(const double* p) { return _mm256_loadu_pd(p); }
  static V broadcast(const double* p) { return _mm256_broadcast_sd(p); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  static V add(V a, V b) { return _mm256_add_pd(a, b); }
  static void store(double* p, V v) { _mm256_storeu_pd(p, v); }
};

constexpr int kRows = 6;             // rows of the register tile: 6 x 2 accumulators + 2 B vectors + 1 broadcast
constexpr int kKBlock = 256;         // products summed before being added to C
template <typename T>
constexpr int kCols = 2 * Simd<T>::kLanes;  // columns of the register tile (16 float, 8 double)

inline int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Packed A: ceil(M/kRows) panels, each (K, kRows) contiguous, rows past M zero.
template <typename T>
int64_t packed_a_size(int M, int K) { return round_up(M, kRows) * K; }

// Packed B: ceil(N/kCols) panels, each (K, kCols) contiguous, columns past N zero.
template <typename T>
int64_t packed_b_size(int N, int K) { return round_up(N, kCols<T>) * K; }

// A (M,K), leading dim lda -> packed (see packed_a_size); returns packed
template <typename T>
const T* pack_a(T* packed, const T* A, int lda, int M, int K) {
  const int panels = int(round_up(M, kRows) / kRows);
#pragma omp parallel for schedule(static)
  for (int panel = 0; panel < panels; ++panel) {
    T* dst = packed + int64_t(panel) * K * kRows;
    for (int r = 0; r < kRows; ++r) {
      const int m = panel * kRows + r;
      for (int k = 0; k < K; ++k) dst[int64_t(k) * kRows + r] = m < M ? A[int64_t(m) * lda + k] : T(0);
    }
  }
  return packed;
}

// Fetches the rows of C a tile adds its sums into (rows x `cols` elements, leading dim ldc) while its k loop runs:
// a chunk's C (512 channels x 256 pixels, 512 KB) does not stay in a 512 KiB L2 beside its packed columns, and a
// tile that waited for its rows from L3 after the loop stalled on every K block.
template <typename T>
inline void prefetch_tile(const T* C, int ldc, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const char* row = reinterpret_cast<const char*>(C + int64_t(r) * ldc);
    _mm_prefetch(row, _MM_HINT_T0);
    _mm_prefetch(row + (cols * sizeof(T) - 1), _MM_HINT_T0);  // the row's last element: its line when it spans two
  }
}

// One register tile: sum over k in [0, kc) of a (kc, kRows) x one column panel (kc, kCols; row k at
// source.row(0, k): gemm_columns.h), then C (rows x cols valid, leading dim ldc) = that sum on the first K block,
// C + that sum on later ones. The twelve accumulators are named variables: kept in an array, GCC spilled them to
// the stack on every k.
template <typename T, typename Source>
inline void register_tile(int kc, const T* a, const Source& source, T* C, int ldc, int rows, int cols,
                          bool first_block) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int L = S::kLanes;
  V c00 = S::zero(), c01 = S::zero(), c10 = S::zero(), c11 = S::zero(), c20 = S::zero(), c21 = S::zero();
  V c30 = S::zero(), c31 = S::zero(), c40 = S::zero(), c41 = S::zero(), c50 = S::zero(), c51 = S::zero();
  if (!first_block) prefetch_tile(C, ldc, rows, cols);
  for (int k = 0; k < kc; ++k, a += kRows) {
    const T* b = source.row(0, k);
    const V b0 = S::load(b), b1 = S::load(b + L);
    V ar = S::broadcast(a + 0);
    c00 = S::fma(ar, b0, c00), c01 = S::fma(ar, b1, c01);
    ar = S::broadcast(a + 1);
    c10 = S::fma(ar, b0, c10), c11 = S::fma(ar, b1, c11);
    ar = S::broadcast(a + 2);
    c20 = S::fma(ar, b0, c20), c21 = S::fma(ar, b1, c21);
    ar = S::broadcast(a + 3);
    c30 = S::fma(ar, b0, c30), c31 = S::fma(ar, b1, c31);
    ar = S::broadcast(a + 4);
    c40 = S::fma(ar, b0, c40), c41 = S::fma(ar, b1, c41);
    ar = S::broadcast(a + 5);
    c50 = S::fma(ar, b0, c50), c51 = S::fma(ar, b1, c51);
  }
  alignas(32) T sums[kRows][2 * L];
  const V acc[kRows][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  if (rows == kRows && cols == 2 * L) {
    for (int r = 0; r < kRows; ++r) {
      T* c = C + int64_t(r) * ldc;
      S::store(c, first_block ? acc[r][0] : S::add(S::load(c), acc[r][0]));
      S::store(c + L, first_block ? acc[r][1] : S::add(S::load(c + L), acc[r][1]));
    }
    return;
  }
  // A tile at the edge of C: the same sums, written element by element (one IEEE add, as in the vector path).
  for (int r = 0; r < kRows; ++r) S::store(sums[r], acc[r][0]), S::store(sums[r] + L, acc[r][1]);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < cols; ++j) {
      T& c = C[int64_t(r) * ldc + j];
      c = first_block ? sums[r][j] : c + sums[r][j];
    }
}

// Whether gemm_packed_block runs the AVX-512 register tile: on where the CPU has AVX-512F; the tests switch it off to
// hold the two kernels to each other.
inline std::atomic<bool>& avx512_kernel_on() {
  static std::atomic<bool> on{cpu_has_avx512()};
  return on;
}

// B of one K block for gemm_packed_block: column panels packed (packed_b_size(p1 - p0, kc) elements, panel i at
// packed + i * kc * kCols), except those with a direct origin, which the tiles read from the image (DirectRows) and
// whose packed space is left unwritten.
template <typename T>
struct BlockColumns {
  const T* packed;
  const T* const* direct = nullptr;  // per panel: its origin, or null where packed; null: every panel packed
  const int64_t* offsets = nullptr;  // per k of the block (DirectRows)

  bool is_direct(int panel) const { return direct && direct[panel]; }
  PackedRows<T> packed_rows(int panel, int kc) const {
    return {packed + int64_t(panel) * kc * kCols<T>, int64_t(kc) * kCols<T>, kCols<T>};
  }
  DirectRows<T> direct_rows(int panel) const { return {direct + panel, offsets}; }
};

// A register tile on AVX-512 of one row panel of A (kRows rows) by `panels` column panels (1 to 4), or of two row
// panels (a[1] the second) by `panels` column panels (1 or 2).
template <typename T, typename Source>
SSD_AVX512 inline void tile_avx512(bool two_row_panels, int panels, int kc, const T* const (&a)[2],
                                   const Source& source, T* c, int ldc, int rows, int cols, bool first_block) {
  const T* const one[1] = {a[0]};
  if (two_row_panels)
    return panels == 2 ? register_tile_avx512<T, kRows, 2, 2>(kc, a, source, c, ldc, rows, cols, first_block)
                       : register_tile_avx512<T, kRows, 1, 2>(kc, a, source, c, ldc, rows, cols, first_block);
  switch (panels) {
    case 4: return register_tile_avx512<T, kRows, 4, 1>(kc, one, source, c, ldc, rows, cols, first_block);
    case 3: return register_tile_avx512<T, kRows, 3, 1>(kc, one, source, c, ldc, rows, cols, first_block);
    case 2: return register_tile_avx512<T, kRows, 2, 1>(kc, one, source, c, ldc, rows, cols, first_block);
    default: return register_tile_avx512<T, kRows, 1, 1>(kc, one, source, c, ldc, rows, cols, first_block);
  }
}

// gemm_packed_block on AVX-512: the same loops over pairs of row panels, in tiles of 2 kRows rows x 2 column panels
// (an odd last row panel: kRows x 4), fewer at the end of a row; each tile reads all packed or all direct, and a
// group that mixes the two goes one panel at a time. B's rows stream from L2 and A's stay in L1, so the tall tile
// (2 zmm of B per k for 24 FMAs, where kRows x 4 loads 4) runs faster: on an Intel Xeon (AVX-512, 2 cores),
// alternating call by call in one process against kRows x 4, the forward at batch 1 took 0.91-0.97x its time and
// the training step at batch 4 0.90-0.96x (6 and 5 rounds); per layer at batch 1 the 38x38 and 75x75 layers went from
// 240-280 to 290-340 GFLOP/s (PyTorch 360-410).
template <typename T>
SSD_AVX512 void gemm_packed_block_avx512(int M, int rp0, int rp1, int K, int k0, int k1, const T* A_packed, int p0,
                                         int p1, const BlockColumns<T>& B, T* C, int ldc, bool accumulate) {
  static_assert(kCols<T> == Zmm<T>::kLanes, "a column panel is one zmm wide");
  constexpr int NR = kCols<T>;
  const int kc = k1 - k0, panels = int(round_up(p1 - p0, NR) / NR);
  const bool first_block = k0 == 0 && !accumulate;
  for (int rp = rp0; rp < rp1;) {
    const bool two = rp + 1 < rp1;
    const T* a0 = A_packed + int64_t(rp) * K * kRows + int64_t(k0) * kRows;
    const T* const a[2] = {a0, two ? a0 + int64_t(K) * kRows : a0};  // the next row panel, if in range
    const int m0 = rp * kRows, rows = std::min(two ? 2 * kRows : kRows, M - m0), group_panels = two ? 2 : 4;
    T* c_rows = C + int64_t(m0) * ldc + p0;
    for (int panel = 0; panel < panels; panel += group_panels) {
      const int group = std::min(group_panels, panels - panel), cols = std::min(group * NR, p1 - p0 - panel * NR);
      int direct = 0;
      for (int i = panel; i < panel + group; ++i) direct += B.is_direct(i);
      T* c = c_rows + panel * NR;
      if (direct == 0) {
        tile_avx512(two, group, kc, a, B.packed_rows(panel, kc), c, ldc, rows, cols, first_block);
      } else if (direct == group) {
        tile_avx512(two, group, kc, a, B.direct_rows(panel), c, ldc, rows, cols, first_block);
      } else {
        for (int i = panel; i < panel + group; ++i, c += NR) {
          const int panel_cols = std::min(NR, p1 - p0 - i * NR);
          if (B.is_direct(i))
            tile_avx512(two, 1, kc, a, B.direct_rows(i), c, ldc, rows, panel_cols, first_block);
          else
            tile_avx512(two, 1, kc, a, B.packed_rows(i, kc), c, ldc, rows, panel_cols, first_block);
        }
      }
    }
    rp += two ? 2 : 1;
  }
}

// One K block [k0, k1) of C = A * B, for the row panels [rp0, rp1) of C and its columns [p0, p1): C (M, ., leading
// dim ldc; column p at C + p) = the block's products on the first block, C + them on later ones (on every block
// if `accumulate`: C += A * B, the old C first in the sequence of additions). A is packed whole
// (pack_a, K columns); B holds only this block's rows of columns p0..p1 (BlockColumns).
// One row panel of A (kRows x (k1-k0), in L1) sweeps all of B's column panels (in L2) before the next.
template <typename T>
void gemm_packed_block(int M, int rp0, int rp1, int K, int k0, int k1, const T* A_packed, int p0, int p1,
                       const BlockColumns<T>& B, T* C, int ldc, bool accumulate) {
  if (avx512_kernel_on().load(std::memory_order_relaxed))
    return gemm_packed_block_avx512(M, rp0, rp1, K, k0, k1, A_packed, p0, p1, B, C, ldc, accumulate);
  constexpr int NR = kCols<T>;
  const int kc = k1 - k0, panels = int(round_up(p1 - p0, NR) / NR);
  const bool first_block = k0 == 0 && !accumulate;
  for (int rp = rp0; rp < rp1; ++rp) {
    const T* a = A_packed + int64_t(rp) * K * kRows + int64_t(k0) * kRows;
    const int m0 = rp * kRows, rows = std::min(kRows, M - m0);
    for (int panel = 0; panel < panels; ++panel) {
      T* c = C + int64_t(m0) * ldc + p0 + panel * NR;
      const int cols = std::min(NR, p1 - p0 - panel * NR);
      if (B.is_direct(panel))
        register_tile(kc, a, B.direct_rows(panel), c, ldc, rows, cols, first_block);
      else
        register_tile(kc, a, B.packed_rows(panel, kc), c, ldc, rows, cols, first_block);
    }
  }
}

}  // namespace ssd

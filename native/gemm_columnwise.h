// C (M,N) = A (M,K) * B (K,N), row-major, with every element of C computed by the same sequence of roundings:
// the K products are summed in blocks of kSumBlock (part = part + A[m,k] * B[k,n], no FMA contraction with
// -ffp-contract=off), and the block sums added in order (C = C + part). Blocked summation keeps the rounding error
// near that of a blocked BLAS (a plain running sum over K = 4608 terms was up to 2.3x less accurate than the
// reference on some layers).
//
// Why not OpenBLAS here: its sgemm rounds some 16-column blocks differently from their neighbours, so two
// identical image patches (flat regions, the all-zero image) give outputs one ULP apart, and a following max-pool
// then routes the gradient to a different element of a tied window than the reference does. With this kernel
// identical patches give bit-identical outputs, as the reference's convolution does, and the result does not
// depend on the thread count or the column blocking.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace ssd {

constexpr int kRowsPerBlock = 4;   // rows of A held against one column panel
constexpr int kColsPerBlock = 32;  // columns of B/C per register panel (4 AVX2 / 2 AVX-512 vectors of float)
constexpr int kSumBlock = 64;      // products summed before being added to C

// One register panel: rows [m0, m0+MR) x columns [n0, n0+NC); MR and NC fixed so the compiler keeps the partial
// sums in registers.
template <typename T, int MR, int NC>
inline void panel(int m0, int n0, int K, const T* A, int lda, const T* B, int ldb, T* C, int ldc) {
  for (int k0 = 0; k0 < K; k0 += kSumBlock) {
    T part[MR][NC] = {};
    for (int k = k0; k < std::min(K, k0 + kSumBlock); ++k) {
      const T* b = B + int64_t(k) * ldb + n0;
      for (int r = 0; r < MR; ++r) {
        const T a = A[int64_t(m0 + r) * lda + k];
        for (int j = 0; j < NC; ++j) part[r][j] += a * b[j];
      }
    }
    for (int r = 0; r < MR; ++r) {
      T* c = C + int64_t(m0 + r) * ldc + n0;
      for (int j = 0; j < NC; ++j) c[j] = k0 == 0 ? part[r][j] : c[j] + part[r][j];
    }
  }
}

// The same arithmetic for any leftover rectangle (row and column tails).
template <typename T>
inline void panel_tail(int m0, int m1, int n0, int n1, int K, const T* A, int lda, const T* B, int ldb, T* C, int ldc) {
  for (int m = m0; m < m1; ++m)
    for (int n = n0; n < n1; ++n) {
      T sum = 0;
      for (int k0 = 0; k0 < K; k0 += kSumBlock) {
        T part = 0;
        for (int k = k0; k < std::min(K, k0 + kSumBlock); ++k) part += A[int64_t(m) * lda + k] * B[int64_t(k) * ldb + n];
        sum = k0 == 0 ? part : sum + part;
      }
      C[int64_t(m) * ldc + n] = sum;
    }
}

// A (M,K), B (K,N) -> C (M,N), leading dims lda, ldb, ldc
template <typename T>
void gemm_columnwise(int M, int N, int K, const T* A, int lda, const T* B, int ldb, T* C, int ldc) {
  const int full_cols = N / kColsPerBlock, full_rows = M / kRowsPerBlock * kRowsPerBlock;
#pragma omp parallel for schedule(static)
  for (int block = 0; block <= full_cols; ++block) {
    const int n0 = block * kColsPerBlock;
    const int n1 = std::min(N, n0 + kColsPerBlock);
    if (n0 >= n1) continue;
    for (int m0 = 0; m0 < full_rows; m0 += kRowsPerBlock) {
      if (n1 - n0 == kColsPerBlock)
        panel<T, kRowsPerBlock, kColsPerBlock>(m0, n0, K, A, lda, B, ldb, C, ldc);
      else
        panel_tail(m0, m0 + kRowsPerBlock, n0, n1, K, A, lda, B, ldb, C, ldc);
    }
    panel_tail(full_rows, M, n0, n1, K, A, lda, B, ldb, C, ldc);
  }
}

}  // namespace ssd

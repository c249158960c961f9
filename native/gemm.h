// Row-major GEMM: C = alpha * op(A) * op(B) + beta * C. The fast path is OpenBLAS (scipy-openblas32, openblas.h), run
// single-threaded inside OpenMP threads (OpenBLAS's own pthreads spinning beside OpenMP's made the narrow model 3x
// slower on 2 cores). C is cut into column chunks of a fixed width (a narrow C into row blocks), whatever the
// thread count, and each block is one call over the whole K: every element is computed the same way with 1 thread
// or 16.
#pragma once
#include <omp.h>

#include <algorithm>

#include "openblas.h"

namespace ssd {

inline CBLAS_TRANSPOSE cblas_op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

inline void blas_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                      int ldb, float beta, float* C, int ldc) {
  openblas().sgemm(CblasRowMajor, cblas_op(ta), cblas_op(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

inline void blas_gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
                      const double* B, int ldb, double beta, double* C, int ldc) {
  openblas().dgemm(CblasRowMajor, cblas_op(ta), cblas_op(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// A (M,K) or (K,M) if trans_a, B (K,N) or (N,K) if trans_b -> C (M,N), leading dims lda, ldb, ldc
template <typename T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
          T beta, T* C, int ldc) {
  // 128 columns: even the deep layers' 455-pixel tiles and the 576-wide weight gradients split into enough chunks
  // to keep both cores busy (512 left one idle there).
  constexpr int kChunkColumns = 128;
  const int chunks = (N + kChunkColumns - 1) / kChunkColumns;
  // A GEMM of one column chunk (a 3-channel 3x3 layer's weight gradient, 27 columns, on maps under 128 wide; the
  // small maps' strided input gradients) is cut into up to 4 blocks of rows of at least 16, else one thread did all
  // of it: SSD300's first layer's backward, before it moved to conv3x3_weight_grad.h, took 0.77-0.83 of its time with
  // the rows split (batch 1, alternating calls in one process).
  const int row_blocks = chunks == 1 ? std::clamp(M / 16, 1, 4) : 1, block_rows = (M + row_blocks - 1) / row_blocks;
  openblas();  // a program's first GEMM loads the library here, not inside the parallel loop
#pragma omp parallel for schedule(dynamic)
  for (int item = 0; item < chunks * row_blocks; ++item) {
    const int n0 = item / row_blocks * kChunkColumns, n1 = std::min(N, n0 + kChunkColumns);
    const int m0 = item % row_blocks * block_rows, m1 = std::min(M, m0 + block_rows);
    const T* A_block = trans_a ? A + m0 : A + int64_t(m0) * lda;
    const T* B_block = trans_b ? B + int64_t(n0) * ldb : B + n0;
    blas_gemm(trans_a, trans_b, m1 - m0, n1 - n0, K, alpha, A_block, lda, B_block, ldb, beta,
              C + int64_t(m0) * ldc + n0, ldc);
  }
}

}  // namespace ssd

// Row-major GEMM: C = alpha * op(A) * op(B) + beta * C. The fast path is OpenBLAS (scipy-openblas32), run
// single-threaded inside OpenMP threads (OpenBLAS's own pthreads spinning beside OpenMP's made the narrow model 3x
// slower on 2 cores). C is cut into column chunks of a fixed width, whatever the thread count, and each chunk is
// one call over the whole K: every element is computed the same way with 1 thread or 16.
#pragma once
#include <cblas.h>
#include <omp.h>

#include <algorithm>

namespace ssd {

inline CBLAS_TRANSPOSE cblas_op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

inline void blas_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                      int ldb, float beta, float* C, int ldc) {
  scipy_cblas_sgemm(CblasRowMajor, cblas_op(ta), cblas_op(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

inline void blas_gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
                      const double* B, int ldb, double beta, double* C, int ldc) {
  scipy_cblas_dgemm(CblasRowMajor, cblas_op(ta), cblas_op(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// A (M,K) or (K,M) if trans_a, B (K,N) or (N,K) if trans_b -> C (M,N), leading dims lda, ldb, ldc
template <typename T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
          T beta, T* C, int ldc) {
  // 128 columns: even the deep layers' 455-pixel tiles and the 576-wide weight gradients split into enough chunks
  // to keep both cores busy (512 left one idle there).
  constexpr int kChunkColumns = 128;
  const int chunks = (N + kChunkColumns - 1) / kChunkColumns;
#pragma omp parallel for schedule(dynamic)
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int n0 = chunk * kChunkColumns, n1 = std::min(N, n0 + kChunkColumns);
    const T* B_block = trans_b ? B + int64_t(n0) * ldb : B + n0;
    blas_gemm(trans_a, trans_b, M, n1 - n0, K, alpha, A, lda, B_block, ldb, beta, C + n0, ldc);
  }
}

}  // namespace ssd

// Row-major GEMM: C = alpha * op(A) * op(B) + beta * C. The fast path is OpenBLAS (scipy-openblas32);
// gemm_reference is the plain triple loop that the tests hold the fast path to.
#pragma once
#include <cblas.h>

namespace ssd {

inline CBLAS_TRANSPOSE cblas_op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

// A (M,K) or (K,M) if trans_a, B (K,N) or (N,K) if trans_b -> C (M,N), leading dims lda, ldb, ldc
inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  scipy_cblas_sgemm(CblasRowMajor, cblas_op(trans_a), cblas_op(trans_b), M, N, K, alpha, A, lda, B, ldb, beta, C,
                    ldc);
}

inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
                 const double* B, int ldb, double beta, double* C, int ldc) {
  scipy_cblas_dgemm(CblasRowMajor, cblas_op(trans_a), cblas_op(trans_b), M, N, K, alpha, A, lda, B, ldb, beta, C,
                    ldc);
}

// Same contract as gemm; accumulates each dot product in order, in T.
template <typename T>
void gemm_reference(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
                    int ldb, T beta, T* C, int ldc) {
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      T acc = 0;
      for (int k = 0; k < K; ++k) {
        const T a = trans_a ? A[k * lda + m] : A[m * lda + k];
        const T b = trans_b ? B[n * ldb + k] : B[k * ldb + n];
        acc += a * b;
      }
      C[m * ldc + n] = alpha * acc + (beta == T(0) ? T(0) : beta * C[m * ldc + n]);
    }
}

}  // namespace ssd

// The AVX-512 register tiles of the packed GEMM (gemm_packed.h), for CPUs that have AVX-512 (Zen 4: each zmm FMA
// runs as two 256-bit halves, so the peak equals AVX2's, but a 6 x 64 tile needs a third of the AVX2 kernel's loads
// and instructions per FMA, and sustained 10-15% more than the 6 x 16 AVX2 tile on the same packed panels; the GEMM
// now runs 12 x 32 tiles, which load half of 6 x 64's B: gemm_packed.h). Compiled with a target attribute, so the
// module still loads on AVX2-only CPUs; gemm_packed.h calls them only where the CPU reports AVX-512F.
//
// The arithmetic per element of C is the AVX2 kernel's: products fused-multiply-added in k order from 0, then
// C = sum (first K block) or C = C + sum, one IEEE add. Edge tiles store through lane masks, never computing an
// element differently: the two kernels give bit-identical results (tests/test_kernels.py, tests/test_determinism.py).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#define SSD_AVX512 __attribute__((target("avx512f")))

namespace ssd {

template <typename T>
struct Zmm;

template <>
struct Zmm<float> {
  using V = __m512;
  static constexpr int kLanes = 16;
  SSD_AVX512 static V zero() { return _mm512_setzero_ps(); }
  SSD_AVX512 static V load(const float* p) { return _mm512_loadu_ps(p); }
  SSD_AVX512 static V broadcast(const float* p) { return _mm512_set1_ps(*p); }
  SSD_AVX512 static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  SSD_AVX512 static V add(V a, V b) { return _mm512_add_ps(a, b); }
  SSD_AVX512 static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  // the first n lanes (0 < n < 16) from / to memory; the other lanes are neither read nor written
  SSD_AVX512 static V load_first(const float* p, int n) { return _mm512_maskz_loadu_ps(__mmask16((1u << n) - 1), p); }
  SSD_AVX512 static void store_first(float* p, V v, int n) { _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1), v); }
};

template <>
struct Zmm<double> {
  using V = __m512d;
  static constexpr int kLanes = 8;
  SSD_AVX512 static V zero() { return _mm512_setzero_pd(); }
  SSD_AVX512 static V load(const double* p) { return _mm512_loadu_pd(p); }
  SSD_AVX512 static V broadcast(const double* p) { return _mm512_set1_pd(*p); }
  SSD_AVX512 static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  SSD_AVX512 static V add(V a, V b) { return _mm512_add_pd(a, b); }
  SSD_AVX512 static void store(double* p, V v) { _mm512_storeu_pd(p, v); }
  SSD_AVX512 static V load_first(const double* p, int n) { return _mm512_maskz_loadu_pd(__mmask8((1u << n) - 1), p); }
  SSD_AVX512 static void store_first(double* p, V v, int n) { _mm512_mask_storeu_pd(p, __mmask8((1u << n) - 1), v); }
};

// Does this CPU (and its operating system) run AVX-512F code?
inline bool cpu_has_avx512() { return __builtin_cpu_supports("avx512f"); }

// One register tile of RowPanels x Rows rows by Panels column panels (each one zmm wide: Zmm<T>::kLanes columns): the
// sum over k in [0, kc) of the packed rows of A (row panel i at a[i]: (kc, Rows), row r of it at a[i][k * Rows + r])
// times the column panels' rows (source.row(p, k): gemm_columns.h), then C (rows x cols valid, leading dim ldc) =
// that sum on the first K block, C + that sum on later ones. Every panel holds at least one valid column
// (cols > (Panels - 1) * kLanes). The loops over rows and panels are unrolled, so that the accumulators live in
// registers (6 x 4 or 12 x 2: 24 of the 32 zmm). Per element the arithmetic is the same in every shape; the shapes
// differ in what they load per k: 6 x 4 reads four zmm of B and broadcasts six values of A, 12 x 2 reads two and
// broadcasts twelve (B streams from L2, A stays in L1).
template <typename T, int Rows, int Panels, int RowPanels, typename Source>
SSD_AVX512 inline void register_tile_avx512(int kc, const T* const (&a)[RowPanels], const Source& source, T* C,
                                            int ldc, int rows, int cols, bool first_block) {
  using Z = Zmm<T>;
  using V = typename Z::V;
  constexpr int L = Z::kLanes, AllRows = Rows * RowPanels;
  V acc[AllRows][Panels];
#pragma GCC unroll 16
  for (int r = 0; r < AllRows; ++r)
#pragma GCC unroll 4
    for (int p = 0; p < Panels; ++p) acc[r][p] = Z::zero();
  for (int k = 0; k < kc; ++k) {
    V bv[Panels];
#pragma GCC unroll 4
    for (int p = 0; p < Panels; ++p) bv[p] = Z::load(source.row(p, k));
#pragma GCC unroll 16
    for (int r = 0; r < AllRows; ++r) {
      const V ar = Z::broadcast(a[r / Rows] + int64_t(k) * Rows + r % Rows);
#pragma GCC unroll 4
      for (int p = 0; p < Panels; ++p) acc[r][p] = Z::fma(ar, bv[p], acc[r][p]);
    }
  }
  for (int r = 0; r < rows; ++r)
#pragma GCC unroll 4
    for (int p = 0; p < Panels; ++p) {
      T* c = C + int64_t(r) * ldc + p * L;
      const int n = std::min(L, cols - p * L);
      if (n == L)
        Z::store(c, first_block ? acc[r][p] : Z::add(Z::load(c), acc[r][p]));
      else
        Z::store_first(c, first_block ? acc[r][p] : Z::add(Z::load_first(c, n), acc[r][p]), n);
    }
}

}  // namespace ssd

// L2Norm of SSD's conv4_3 source, as torchvision computes it: scale[c] * (x / max(||x||_2, eps)), the norm
// taken over channels at each pixel (F.normalize, eps = 1e-12 as a clamp, not an addition).
//
// Backward follows autograd's formulas for that expression, including its two guards at a zero vector: the clamp
// passes no gradient where ||x|| < eps, and the norm's derivative x/||x|| is taken as 0 where ||x|| == 0. Without
// them, d sqrt(s)/ds = 1/(2 sqrt(s)) is infinite at s = 0 and an all-zero pixel makes the gradient NaN.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "faults.h"

namespace ssd {

constexpr double kL2NormEps = 1e-12;

// inp (C,HW), scale (C) -> out (C,HW), norm (HW) = ||x|| per pixel, kept for backward
template <typename T>
void l2norm_forward(T* out, T* norm, const T* inp, const T* scale, int C, int HW) {
  for (int p = 0; p < HW; ++p) norm[p] = T(0);
  for (int c = 0; c < C; ++c)
    for (int p = 0; p < HW; ++p) norm[p] += inp[int64_t(c) * HW + p] * inp[int64_t(c) * HW + p];
  const bool inside = fault_on(Fault::L2NormEpsInsideSqrt);  // the bug: sqrt(||x||^2 + eps), no clamp
  for (int p = 0; p < HW; ++p) norm[p] = std::sqrt(norm[p] + (inside ? T(kL2NormEps) : T(0)));
  const T eps = fault_on(Fault::L2NormWithoutEps) || inside ? T(0) : T(kL2NormEps);
  for (int c = 0; c < C; ++c)
    for (int p = 0; p < HW; ++p) {
      const T denom = std::max(norm[p], eps);
      out[int64_t(c) * HW + p] = scale[c] * (inp[int64_t(c) * HW + p] / denom);
    }
}

// dout (C,HW), inp (C,HW), scale (C), norm (HW) -> dinp (C,HW) +=, dscale (C) +=
template <typename T>
void l2norm_backward(T* dinp, T* dscale, const T* dout, const T* inp, const T* scale, const T* norm, int C, int HW) {
  std::vector<T> ddenom(HW, T(0));  // d loss / d max(norm, eps)
  for (int c = 0; c < C; ++c) {
    T dscale_c = 0;
    for (int p = 0; p < HW; ++p) {
      const int64_t i = int64_t(c) * HW + p;
      const T denom = std::max(norm[p], T(kL2NormEps));
      const T dnormalized = dout[i] * scale[c];
      dscale_c += dout[i] * (inp[i] / denom);
      dinp[i] += dnormalized / denom;
      ddenom[p] += -dnormalized * inp[i] / (denom * denom);
    }
    dscale[c] += dscale_c;
  }
  const bool guarded = !fault_on(Fault::SqrtBackwardWithoutEps);
  for (int p = 0; p < HW; ++p) {
    const bool clamped = norm[p] < T(kL2NormEps);  // clamp_min passes gradient only where norm >= eps
    if (guarded && (clamped || norm[p] == T(0))) continue;
    const T dnorm_over_norm = ddenom[p] / norm[p];
    for (int c = 0; c < C; ++c) dinp[int64_t(c) * HW + p] += inp[int64_t(c) * HW + p] * dnorm_over_norm;
  }
}

}  // namespace ssd

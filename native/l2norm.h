// L2Norm of SSD's conv4_3 source, as torchvision computes it: scale[c] * (x / max(||x||_2, eps)), the norm
// taken over channels at each pixel (F.normalize, eps = 1e-12 as a clamp, not an addition).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ssd {

constexpr double kL2NormEps = 1e-12;

// inp (C,HW), scale (C) -> out (C,HW), denom (HW) = max(||x||, eps) kept for backward
template <typename T>
void l2norm_forward(T* out, T* denom, const T* inp, const T* scale, int C, int HW) {
  for (int p = 0; p < HW; ++p) denom[p] = T(0);
  for (int c = 0; c < C; ++c)
    for (int p = 0; p < HW; ++p) denom[p] += inp[int64_t(c) * HW + p] * inp[int64_t(c) * HW + p];
  for (int p = 0; p < HW; ++p) denom[p] = std::max(std::sqrt(denom[p]), T(kL2NormEps));
  for (int c = 0; c < C; ++c)
    for (int p = 0; p < HW; ++p) out[int64_t(c) * HW + p] = scale[c] * (inp[int64_t(c) * HW + p] / denom[p]);
}

}  // namespace ssd

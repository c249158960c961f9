// IoU between ground-truth boxes and priors, both xyxy pixels, in torchvision's box_iou operation order (no +1),
// so that float results are bit-identical and threshold decisions agree.
#pragma once
#include <algorithm>
#include <cstdint>

namespace ssd {

// gt (M,4), priors (P,4) -> iou (M,P)
template <typename T>
void box_iou(T* iou, const T* gt, const T* priors, int M, int64_t P) {
  for (int m = 0; m < M; ++m) {
    const T* g = gt + 4 * m;
    const T area_g = (g[2] - g[0]) * (g[3] - g[1]);
    for (int64_t p = 0; p < P; ++p) {
      const T* a = priors + 4 * p;
      const T area_a = (a[2] - a[0]) * (a[3] - a[1]);
      const T w = std::max(std::min(g[2], a[2]) - std::max(g[0], a[0]), T(0));
      const T h = std::max(std::min(g[3], a[3]) - std::max(g[1], a[1]), T(0));
      const T inter = w * h;
      iou[m * P + p] = inter / (area_g + area_a - inter);
    }
  }
}

}  // namespace ssd

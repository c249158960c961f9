// torchvision's BoxCoder.encode_single with weights (10, 10, 5, 5), in its operation order: widths and centres
// recomputed from the corners, then (w * (gt_c - anchor_c)) / anchor_w and w * log(gt_w / anchor_w).
#pragma once
#include <cmath>

#include "faults.h"

namespace ssd {

constexpr double kBoxWeights[4] = {10.0, 10.0, 5.0, 5.0};

// gt (4), anchor (4), both xyxy -> target (4) as (t_cx, t_cy, t_w, t_h)
template <typename T>
void encode_box(T* target, const T* gt, const T* anchor) {
  const T aw = anchor[2] - anchor[0], ah = anchor[3] - anchor[1];
  const T acx = anchor[0] + T(0.5) * aw, acy = anchor[1] + T(0.5) * ah;
  const T gw = gt[2] - gt[0], gh = gt[3] - gt[1];
  const T gcx = gt[0] + T(0.5) * gw, gcy = gt[1] + T(0.5) * gh;
  const int swap = fault_on(Fault::SwappedVariances) ? 2 : 0;  // the bug: centre and size weights exchanged
  target[0] = T(kBoxWeights[(0 + swap) % 4]) * (gcx - acx) / aw;
  target[1] = T(kBoxWeights[(1 + swap) % 4]) * (gcy - acy) / ah;
  target[2] = T(kBoxWeights[(2 + swap) % 4]) * std::log(gw / aw);
  target[3] = T(kBoxWeights[(3 + swap) % 4]) * std::log(gh / ah);
}

}  // namespace ssd

// torchvision's SSDMatcher(0.5): each prior takes the GT it overlaps most (first maximum on ties) when that IoU
// is >= threshold, else -1; then every GT claims its best prior (first maximum), whatever the IoU.
//
// Deliberate rule for two GTs sharing a best prior: GTs are applied in index order, so the later GT wins.
// torchvision assigns all at once with an advanced-index write whose result for duplicate indices PyTorch leaves
// undefined; on CPU it is last-wins, which this reproduces deterministically.
#pragma once
#include <cstdint>

#include "faults.h"

namespace ssd {

constexpr double kMatchThreshold = 0.5;

// iou (M,P) -> matched (P) in [-1, M)
template <typename T>
void ssd_match(int64_t* matched, const T* iou, int M, int64_t P) {
  const bool strict = fault_on(Fault::IouThresholdStrict), last_wins = fault_on(Fault::GtTieLastWins);
  for (int64_t p = 0; p < P; ++p) {
    int best = 0;
    for (int m = 1; m < M; ++m) {
      const T candidate = iou[m * P + p], incumbent = iou[best * P + p];
      if (candidate > incumbent || (last_wins && candidate == incumbent)) best = m;
    }
    const T overlap = iou[best * P + p];
    matched[p] = (strict ? overlap > T(kMatchThreshold) : overlap >= T(kMatchThreshold)) ? best : -1;
  }
  const bool reversed = fault_on(Fault::SharedPriorWrongOrder);
  for (int i = 0; i < M; ++i) {
    const int m = reversed ? M - 1 - i : i;
    const T* row = iou + m * P;
    int64_t best = 0;
    for (int64_t p = 1; p < P; ++p)
      if (row[p] > row[best]) best = p;
    matched[best] = m;
  }
}

}  // namespace ssd

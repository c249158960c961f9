// SSD default boxes (priors) exactly as torchvision's DefaultBoxGenerator builds them for a square image:
// wh pairs computed in double and rounded to float32 (also in the double build, as torchvision stores them),
// centres (i + 0.5) / (size / step) computed in float32, wh clipped to [0, 1] (centres are not), then
// converted to xyxy pixels in T.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "faults.h"

namespace ssd {

struct PriorConfig {
  std::vector<int> feature_sizes;                  // (38, 19, 10, 5, 3, 1)
  std::vector<int> steps;                          // (8, 16, 32, 64, 100, 300)
  std::vector<double> scales;                      // one more than feature maps: (0.07, ..., 0.87, 1.05)
  std::vector<std::vector<int>> aspect_ratios;     // ((2), (2,3), (2,3), (2,3), (2), (2))
  int image_size = 300;

  int anchors(int k) const { return 2 + 2 * int(aspect_ratios[k].size()); }
  int64_t count() const {
    int64_t n = 0;
    for (size_t k = 0; k < feature_sizes.size(); ++k) n += int64_t(feature_sizes[k]) * feature_sizes[k] * anchors(k);
    return n;
  }
};

inline PriorConfig ssd300_priors() {
  return {{38, 19, 10, 5, 3, 1}, {8, 16, 32, 64, 100, 300}, {0.07, 0.15, 0.33, 0.51, 0.69, 0.87, 1.05},
          {{2}, {2, 3}, {2, 3}, {2, 3}, {2}, {2}}, 300};
}

// -> per location, the A_k (w, h) pairs of source k, in torchvision's order, rounded to float32 and clipped
inline std::vector<float> prior_wh_pairs(const PriorConfig& cfg, int k) {
  const double s = cfg.scales[k], s_prime = std::sqrt(cfg.scales[k] * cfg.scales[k + 1]);
  std::vector<double> wh = {s, s, s_prime, s_prime};
  for (int ar : cfg.aspect_ratios[k]) {
    const double sq = std::sqrt(double(ar));
    if (fault_on(Fault::AspectRatioOrder))
      wh.insert(wh.end(), {s / sq, s * sq, s * sq, s / sq});
    else
      wh.insert(wh.end(), {s * sq, s / sq, s / sq, s * sq});
  }
  std::vector<float> out(wh.size());
  for (size_t i = 0; i < wh.size(); ++i) out[i] = std::clamp(float(wh[i]), 0.0f, 1.0f);
  return out;
}

// -> boxes (P,4) as (x1, y1, x2, y2) in pixels, rows ordered source, y, x, anchor
template <typename T>
void default_boxes(T* boxes, const PriorConfig& cfg) {
  int64_t row = 0;
  const T size = T(cfg.image_size);
  for (size_t k = 0; k < cfg.feature_sizes.size(); ++k) {
    const int f = cfg.feature_sizes[k];
    const float cells = float(double(cfg.image_size) / cfg.steps[k]);
    const std::vector<float> wh = prior_wh_pairs(cfg, int(k));
    for (int y = 0; y < f; ++y)
      for (int x = 0; x < f; ++x)
        for (size_t a = 0; a < wh.size() / 2; ++a, ++row) {
          const T cx = T((float(x) + 0.5f) / cells), cy = T((float(y) + 0.5f) / cells);
          const T half_w = T(0.5) * T(wh[2 * a]), half_h = T(0.5) * T(wh[2 * a + 1]);
          boxes[row * 4 + 0] = (cx - half_w) * size;
          boxes[row * 4 + 1] = (cy - half_h) * size;
          boxes[row * 4 + 2] = (cx + half_w) * size;
          boxes[row * 4 + 3] = (cy + half_h) * size;
        }
  }
}

}  // namespace ssd

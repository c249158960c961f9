// The pieces of torchvision's SSD.compute_loss: smooth L1 (beta 1), cross-entropy in the stable log-sum-exp
// form, and hard negative mining per image (3 negatives per positive).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "faults.h"

namespace ssd {

constexpr double kNegativesPerPositive = 3.0;

template <typename T>
T smooth_l1(T d) {
  const T z = std::abs(d);
  return z < T(1) ? T(0.5) * z * z : z - T(0.5);
}

// d/dd of smooth_l1: d inside (-1, 1), its sign outside
template <typename T>
T smooth_l1_grad(T d) {
  return d < T(-1) ? T(-1) : (d > T(1) ? T(1) : d);
}

// logits (K), target -> -log_softmax(logits)[target], the maximum subtracted before exp so no logit overflows
template <typename T>
T softmax_shift(const T* logits, int K) {
  if (fault_on(Fault::SoftmaxWithoutMax)) return T(0);  // the bug: exp(logit) overflows for logits above ~88
  return *std::max_element(logits, logits + K);
}

// exp, or (the ApproximateExp fault) a fast exp good to 13 significant bits: a relative error up to 1.2e-4
template <typename T>
T softmax_exp(T x, bool approximate) {
  const T e = std::exp(x);
  if (!approximate) return e;
  int exponent;
  const T mantissa = std::frexp(e, &exponent);
  return std::ldexp(std::trunc(mantissa * T(8192)) / T(8192), exponent);
}

template <typename T>
T cross_entropy(const T* logits, int K, int64_t target) {
  const T top = softmax_shift(logits, K);
  const bool approximate = fault_on(Fault::ApproximateExp);
  T sum = 0;
  for (int k = 0; k < K; ++k) sum += softmax_exp(logits[k] - top, approximate);
  return -((logits[target] - top) - std::log(sum));  // torch's log_softmax order, negated
}

// logits (K), target, scale -> dlogits (K) += scale * (softmax(logits) - onehot(target))
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, int K, int64_t target, T scale) {
  const T top = softmax_shift(logits, K);
  const bool approximate = fault_on(Fault::ApproximateExp);
  T sum = 0;
  for (int k = 0; k < K; ++k) sum += softmax_exp(logits[k] - top, approximate);
  for (int k = 0; k < K; ++k)
    dlogits[k] += scale * (softmax_exp(logits[k] - top, approximate) / sum - (k == target ? T(1) : T(0)));
}

// cls_loss (P), foreground (P) -> negatives (P): the priors ranked below 3 x (#foreground) when the per-prior
// losses are sorted descending with foreground priors set to -inf, as torchvision does; one image at a time.
// Deliberate rule for ties: equal losses are ranked by prior index, ascending (torchvision's unstable sort leaves
// their order unspecified). As in torchvision, when 3 x #fg exceeds the background count, foreground priors
// (at -inf) fall inside the threshold and are selected as negatives too.
template <typename T>
void mine_hard_negatives(uint8_t* negatives, const T* cls_loss, const uint8_t* foreground, int64_t P) {
  std::vector<T> ranked_loss(P);
  int64_t num_fg = 0;
  for (int64_t p = 0; p < P; ++p) {
    ranked_loss[p] = foreground[p] ? -std::numeric_limits<T>::infinity() : cls_loss[p];
    num_fg += foreground[p] ? 1 : 0;
  }
  std::vector<int64_t> order(P);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return ranked_loss[a] > ranked_loss[b]; });
  const double num_negative = kNegativesPerPositive * double(num_fg) + (fault_on(Fault::NegativesOffByOne) ? 1 : 0);
  for (int64_t rank = 0; rank < P; ++rank) negatives[order[rank]] = double(rank) < num_negative ? 1 : 0;
}

}  // namespace ssd

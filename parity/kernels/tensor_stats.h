// The comparison's statistics in one or two passes over a tensor, in C++: the numpy versions (parity/metrics.py,
// parity/tolerance.py, parity/compare.py) made some thirty passes over every tensor of a parity run, each
// allocating and faulting in full-size temporaries, and the comparisons of one SSD300 batch-4 run took longer than
// the native training step they judge. The numpy versions stay: they handle every dtype and non-finite values, and
// the tests hold these kernels to them (tests/test_tensor_stats.py).
//
// Every kernel reads 1-D contiguous arrays of n elements, cut into chunks of kChunk elements whatever the thread
// count; each chunk's partial results are merged in chunk order, so a result never depends on the thread count.
// This module shares no code with the native port it judges.
#pragma once
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "lanes.h"

namespace tensor_stats {

constexpr int64_t kChunk = int64_t(1) << 16;
constexpr int kWorst = 5;  // the largest errors listed per tensor (compare.WORST_COUNT)

inline int64_t chunk_count(int64_t n) { return (n + kChunk - 1) / kChunk; }

// The `kWorst` largest errors seen, largest first, ties to the lower index (elements are offered in index order,
// so an equal error never displaces an earlier one).
struct Worst {
  int64_t index[kWorst];
  double error[kWorst];
  int count = 0;

  void offer(int64_t i, double e) {
    if (count == kWorst && !(e > error[kWorst - 1])) return;
    int at = count < kWorst ? count++ : kWorst - 1;
    while (at > 0 && e > error[at - 1]) {
      index[at] = index[at - 1], error[at] = error[at - 1];
      --at;
    }
    index[at] = i, error[at] = e;
  }
};

// Non-finite counts and max |a| over the finite elements (0 when there are none).
struct FiniteScan {
  int64_t nan = 0, posinf = 0, neginf = 0;
  double max_abs = 0.0;
};

// A value's bits without its sign, as a signed integer of its width: for such bits integer order is numeric order,
// and infinity and NaN lie at and above kInfinity.
template <typename T>
struct MagnitudeBits;
template <>
struct MagnitudeBits<float> {
  using U = int32_t;
  static constexpr U kMask = 0x7fffffff, kInfinity = 0x7f800000;
};
template <>
struct MagnitudeBits<double> {
  using U = int64_t;
  static constexpr U kMask = 0x7fffffffffffffff, kInfinity = 0x7ff0000000000000;
};

// The largest magnitude's bits over a (n): an integer max, which vectorizes (a floating max with NaN semantics
// does not without -ffast-math, and the float32 scan ran at 10 GB/s where the float64 one reached 20).
template <typename T>
typename MagnitudeBits<T>::U largest_magnitude_bits(const T* a, int64_t n) {
  using B = MagnitudeBits<T>;
  typename B::U largest = 0;
  for (int64_t i = 0; i < n; ++i) {
    typename B::U bits;
    std::memcpy(&bits, a + i, sizeof bits);
    largest = std::max(largest, typename B::U(bits & B::kMask));
  }
  return largest;
}

// a (n) -> FiniteScan. A chunk whose largest magnitude is finite has no NaN or infinity and that magnitude is its
// max |a|; only a chunk with some goes element by element.
template <typename T>
FiniteScan finite_scan(const T* a, int64_t n) {
  std::vector<FiniteScan> parts(chunk_count(n));
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < int64_t(parts.size()); ++c) {
    FiniteScan s;
    const int64_t begin = c * kChunk, end = std::min(n, (c + 1) * kChunk);
    const auto largest = largest_magnitude_bits(a + begin, end - begin);
    if (largest < MagnitudeBits<T>::kInfinity) {
      T magnitude;
      std::memcpy(&magnitude, &largest, sizeof magnitude);
      s.max_abs = double(magnitude);
    } else {
      for (int64_t i = begin; i < end; ++i) {
        const double v = double(a[i]);
        if (std::isnan(v)) ++s.nan;
        else if (std::isinf(v)) ++(v > 0 ? s.posinf : s.neginf);
        else s.max_abs = std::max(s.max_abs, std::fabs(v));
      }
    }
    parts[c] = s;
  }
  FiniteScan total;
  for (const FiniteScan& s : parts) {
    total.nan += s.nan, total.posinf += s.posinf, total.neginf += s.neginf;
    total.max_abs = std::max(total.max_abs, s.max_abs);
  }
  return total;
}

// The reference's own error against the oracle (tolerance.oracle_bound), over the elements where it is finite.
struct ReferenceError {
  double largest = 0.0, energy = 0.0;  // max and sum of squares of |reference - oracle|
  int64_t finite = 0;                  // elements where that difference is finite
  double scale = 0.0;                  // max |oracle| over its finite elements
  int64_t nonzero = 0;                 // oracle elements != 0 (NaN included, as numpy.count_nonzero)
};

// One element of reference_error (the lanes' loop does the same four at a time).
inline void add_reference_error(ReferenceError& s, float reference, double oracle) {
  const double o = oracle, d = double(reference) - o;
  if (std::isfinite(d)) s.largest = std::max(s.largest, std::fabs(d)), s.energy += d * d, ++s.finite;
  if (std::isfinite(o)) s.scale = std::max(s.scale, std::fabs(o));
  s.nonzero += o != 0.0;
}

// reference (n) float32, oracle (n) float64 -> ReferenceError
inline ReferenceError reference_error(const float* reference, const double* oracle, int64_t n) {
  std::vector<ReferenceError> parts(chunk_count(n));
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < int64_t(parts.size()); ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, (c + 1) * kChunk);
    __m256d largest = _mm256_setzero_pd(), energy = largest, scale = largest;
    __m256i finite = _mm256_setzero_si256(), nonzero = finite;
    int64_t i = begin;
    for (; i + 4 <= end; i += 4) {
      const __m256d o = _mm256_loadu_pd(oracle + i), d = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(reference + i)), o);
      const __m256d d_finite = finite_lanes(d), o_finite = finite_lanes(o);
      largest = _mm256_max_pd(largest, _mm256_and_pd(abs_lanes(d), d_finite));
      energy = _mm256_add_pd(energy, _mm256_and_pd(_mm256_mul_pd(d, d), d_finite));
      finite = count_lanes(finite, d_finite);
      scale = _mm256_max_pd(scale, _mm256_and_pd(abs_lanes(o), o_finite));
      nonzero = count_lanes(nonzero, _mm256_cmp_pd(o, _mm256_setzero_pd(), _CMP_NEQ_UQ));  // NaN counts
    }
    ReferenceError s;
    s.largest = max_of_lanes(largest), s.energy = sum_in_lane_order(energy), s.finite = sum_of_lanes(finite);
    s.scale = max_of_lanes(scale), s.nonzero = sum_of_lanes(nonzero);
    for (; i < end; ++i) add_reference_error(s, reference[i], oracle[i]);
    parts[c] = s;
  }
  ReferenceError total;
  for (const ReferenceError& s : parts) {
    total.largest = std::max(total.largest, s.largest), total.energy += s.energy, total.finite += s.finite;
    total.scale = std::max(total.scale, s.scale), total.nonzero += s.nonzero;
  }
  return total;
}

// float32 bits -> a line on which adjacent floats are adjacent integers (metrics.ulp_distance's mapping).
inline int64_t on_ulp_line(float x) {
  int32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits < 0 ? -int64_t(bits & 0x7fffffff) : int64_t(bits);
}

// A finite tensor's native statistics: against the reference (metrics.MetricsAccumulator) and against the oracle
// (compare._measure_finite). Every element must be finite on all three sides.
struct NativeStats {
  double largest_diff = 0.0, largest_rel = 0.0;                        // |native - reference|, and relative
  double diff_energy = 0.0, energy = 0.0, actual_energy = 0.0, cross = 0.0;  // sums of d*d, r*r, n*n, n*r
  int64_t max_ulp = -1;  // over elements with |reference| >= 1e-3 max|reference|; -1 when there are none
  double oracle_largest = 0.0, oracle_energy = 0.0;                    // |native - oracle|
  Worst worst;                                                         // of |native - oracle|
};

// One element of native_stats (the lanes' loop does the same four at a time).
inline void add_native_stats(NativeStats& s, float native, float reference, double oracle, double eps_scale,
                             double sizable, int64_t i) {
  const double a = native, e = reference, diff = std::fabs(a - e), magnitude = std::fabs(e);
  s.largest_diff = std::max(s.largest_diff, diff);
  s.largest_rel = std::max(s.largest_rel, diff / (magnitude + eps_scale + DBL_MIN));  // numpy's order of additions
  s.diff_energy += diff * diff, s.energy += e * e, s.actual_energy += a * a, s.cross += a * e;
  if (magnitude >= sizable) s.max_ulp = std::max(s.max_ulp, std::abs(on_ulp_line(native) - on_ulp_line(reference)));
  const double error = std::fabs(a - oracle);
  s.oracle_largest = std::max(s.oracle_largest, error), s.oracle_energy += error * error;
  s.worst.offer(i, error);
}

// native_stats' maxima and sums in four lanes.
struct NativeLanes {
  __m256d largest_diff = _mm256_setzero_pd(), largest_rel = largest_diff, diff_energy = largest_diff;
  __m256d energy = largest_diff, actual_energy = largest_diff, cross = largest_diff;
  __m256d oracle_largest = largest_diff, oracle_energy = largest_diff;
  __m256i max_ulp = _mm256_set1_epi64x(-1);

  NativeStats folded(const Worst& worst) const {
    NativeStats s;
    s.largest_diff = max_of_lanes(largest_diff), s.largest_rel = max_of_lanes(largest_rel);
    s.diff_energy = sum_in_lane_order(diff_energy), s.energy = sum_in_lane_order(energy);
    s.actual_energy = sum_in_lane_order(actual_energy), s.cross = sum_in_lane_order(cross);
    s.max_ulp = max_of_lanes(max_ulp);
    s.oracle_largest = max_of_lanes(oracle_largest), s.oracle_energy = sum_in_lane_order(oracle_energy);
    s.worst = worst;
    return s;
  }
};

// native (n), reference (n) float32, oracle (n) float64; reference_scale = max |reference| -> NativeStats
inline NativeStats native_stats(const float* native, const float* reference, const double* oracle, int64_t n,
                                double reference_scale) {
  const double eps_scale = double(FLT_EPSILON) * reference_scale;  // the relative error's floor
  const double sizable = 1e-3 * reference_scale;
  const __m256d floor_lanes = _mm256_set1_pd(eps_scale), tiny = _mm256_set1_pd(DBL_MIN);
  const __m256d sizable_lanes = _mm256_set1_pd(sizable);
  std::vector<NativeStats> parts(chunk_count(n));
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < int64_t(parts.size()); ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, (c + 1) * kChunk);
    NativeLanes l;
    Worst worst;
    int64_t i = begin;
    for (; i + 4 <= end; i += 4) {
      const __m128 native4 = _mm_loadu_ps(native + i), reference4 = _mm_loadu_ps(reference + i);
      const __m256d a = _mm256_cvtps_pd(native4), e = _mm256_cvtps_pd(reference4);
      const __m256d diff = abs_lanes(_mm256_sub_pd(a, e)), magnitude = abs_lanes(e);
      l.largest_diff = _mm256_max_pd(l.largest_diff, diff);
      l.largest_rel = _mm256_max_pd(
          l.largest_rel, _mm256_div_pd(diff, _mm256_add_pd(_mm256_add_pd(magnitude, floor_lanes), tiny)));
      l.diff_energy = _mm256_add_pd(l.diff_energy, _mm256_mul_pd(diff, diff));
      l.energy = _mm256_add_pd(l.energy, _mm256_mul_pd(e, e));
      l.actual_energy = _mm256_add_pd(l.actual_energy, _mm256_mul_pd(a, a));
      l.cross = _mm256_add_pd(l.cross, _mm256_mul_pd(a, e));
      const __m256i ulps = abs_epi64_lanes(_mm256_sub_epi64(ulp_line_lanes(native4), ulp_line_lanes(reference4)));
      const __m256d counted = _mm256_cmp_pd(magnitude, sizable_lanes, _CMP_GE_OQ);
      l.max_ulp = max_epi64_lanes(l.max_ulp, _mm256_blendv_epi8(_mm256_set1_epi64x(-1), ulps,
                                                                _mm256_castpd_si256(counted)));
      const __m256d error = abs_lanes(_mm256_sub_pd(a, _mm256_loadu_pd(oracle + i)));
      l.oracle_largest = _mm256_max_pd(l.oracle_largest, error);
      l.oracle_energy = _mm256_add_pd(l.oracle_energy, _mm256_mul_pd(error, error));
      // The worst list changes rarely once full: offer the four (in index order) only if one beats its last.
      if (worst.count < kWorst ||
          _mm256_movemask_pd(_mm256_cmp_pd(error, _mm256_set1_pd(worst.error[kWorst - 1]), _CMP_GT_OQ))) {
        double errors[4];
        _mm256_storeu_pd(errors, error);
        for (int k = 0; k < 4; ++k) worst.offer(i + k, errors[k]);
      }
    }
    NativeStats s = l.folded(worst);
    for (; i < end; ++i) add_native_stats(s, native[i], reference[i], oracle[i], eps_scale, sizable, i);
    parts[c] = s;
  }
  NativeStats total;
  for (const NativeStats& s : parts) {
    total.largest_diff = std::max(total.largest_diff, s.largest_diff);
    total.largest_rel = std::max(total.largest_rel, s.largest_rel);
    total.diff_energy += s.diff_energy, total.energy += s.energy;
    total.actual_energy += s.actual_energy, total.cross += s.cross;
    total.max_ulp = std::max(total.max_ulp, s.max_ulp);
    total.oracle_largest = std::max(total.oracle_largest, s.oracle_largest);
    total.oracle_energy += s.oracle_energy;
    for (int k = 0; k < s.worst.count; ++k) total.worst.offer(s.worst.index[k], s.worst.error[k]);
  }
  return total;
}

// A side's errors against per-element bounds (compare._margins): how many exceed their bound, the largest
// error / bound and the largest error, and the kWorst largest ratios (ties to the lower index). An element whose
// error is not finite counts as error 0 (the non-finite check judges it); an infinite bound gives ratio 0.
struct Margins {
  int64_t beyond = 0;
  double largest = 0.0, largest_error = 0.0;
  Worst worst;  // by error / bound
};

// side (n) float32, oracle (n) float64, bound (n) float32 or float64 -> Margins
template <typename B>
Margins margins(const float* side, const double* oracle, const B* bound, int64_t n) {
  std::vector<Margins> parts(chunk_count(n));
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < int64_t(parts.size()); ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, (c + 1) * kChunk);
    Margins m;
    for (int64_t i = begin; i < end; ++i) {
      double error = std::fabs(double(side[i]) - oracle[i]);
      if (!std::isfinite(error)) error = 0.0;
      const double limit = double(bound[i]), ratio = error > 0.0 ? error / limit : 0.0;
      m.beyond += error > limit;
      m.largest = std::max(m.largest, ratio), m.largest_error = std::max(m.largest_error, error);
      if (m.worst.count < kWorst || ratio > m.worst.error[kWorst - 1]) m.worst.offer(i, ratio);
    }
    parts[c] = m;
  }
  Margins total;
  for (const Margins& m : parts) {
    total.beyond += m.beyond;
    total.largest = std::max(total.largest, m.largest);
    total.largest_error = std::max(total.largest_error, m.largest_error);
    for (int k = 0; k < m.worst.count; ++k) total.worst.offer(m.worst.index[k], m.worst.error[k]);
  }
  return total;
}

// bound (n) float64 -> out (n) float32, each the nearest float32 not below it (a bound kept in half the memory).
inline void round_up_to_float32(const double* bound, float* out, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float narrow = float(bound[i]);
    out[i] = double(narrow) < bound[i] ? std::nextafter(narrow, std::numeric_limits<float>::infinity()) : narrow;
  }
}

// Elements with |native - oracle| > bound.
template <typename A, typename O>
int64_t count_beyond(const A* native, const O* oracle, int64_t n, double bound) {
  int64_t count = 0;
#pragma omp parallel for schedule(static) reduction(+ : count)
  for (int64_t i = 0; i < n; ++i) count += std::fabs(double(native[i]) - double(oracle[i])) > bound;
  return count;
}

// max |native64 - oracle| where the oracle is finite; NaN if any such difference is NaN (compare._largest_difference).
inline double largest_difference(const double* native64, const double* oracle, int64_t n) {
  std::vector<double> parts(chunk_count(n), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < int64_t(parts.size()); ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, (c + 1) * kChunk);
    __m256d largest = _mm256_setzero_pd();
    bool nan = false;
    int64_t i = begin;
    for (; i + 4 <= end && !nan; i += 4) {
      const __m256d o = _mm256_loadu_pd(oracle + i), o_finite = finite_lanes(o);
      const __m256d d = abs_lanes(_mm256_sub_pd(_mm256_loadu_pd(native64 + i), o));
      nan = _mm256_movemask_pd(_mm256_and_pd(_mm256_cmp_pd(d, d, _CMP_UNORD_Q), o_finite));
      largest = _mm256_max_pd(largest, _mm256_and_pd(d, o_finite));
    }
    double part = max_of_lanes(largest);
    for (; i < end && !nan; ++i) {
      if (!std::isfinite(oracle[i])) continue;
      const double d = std::fabs(native64[i] - oracle[i]);
      nan = std::isnan(d);
      part = std::max(part, d);
    }
    parts[c] = nan ? std::numeric_limits<double>::quiet_NaN() : part;
  }
  double total = 0.0;
  for (double p : parts) {
    if (std::isnan(p)) return p;
    total = std::max(total, p);
  }
  return total;
}

}  // namespace tensor_stats

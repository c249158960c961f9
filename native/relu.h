// ReLU, fused after a conv by the model: the tap is the post-ReLU activation. Element-wise, so splitting the
// elements over threads changes nothing in the result.
#pragma once
#include <cstdint>

namespace ssd {

// x (n) -> x (n), in place
template <typename T>
void relu_forward(T* x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > T(0) ? x[i] : T(0);
}

// dout (n), out (n) -> dinp (n); the gradient passes where the output is positive, as torch's threshold_backward
template <typename T>
void relu_backward(T* dinp, const T* dout, const T* out, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dinp[i] = out[i] > T(0) ? dout[i] : T(0);
}

// dout (n), pass (n) -> dinp (n); the gradient passes where `pass` is set: a ReLU replayed with another side's
// decisions at near-zero inputs (the harness's isolated backward)
template <typename T>
void relu_backward_routed(T* dinp, const T* dout, const uint8_t* pass, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dinp[i] = pass[i] ? dout[i] : T(0);
}

}  // namespace ssd

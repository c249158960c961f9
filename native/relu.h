// ReLU's backward. The forward is fused into the convolution that feeds it (conv2d_forward's `relu`: x > 0 ? x : 0,
// the tap is the post-ReLU activation). Element-wise, so splitting the elements over threads changes nothing.
#pragma once
#include <cstdint>

namespace ssd {

// dout (n), out (n) -> dinp (n); the gradient passes where the output is positive, as torch's threshold_backward
template <typename T>
void relu_backward(T* dinp, const T* dout, const T* out, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dinp[i] = out[i] > T(0) ? dout[i] : T(0);
}

// dout (n), pass (n) -> dinp (n); the gradient passes where `pass` is set: a ReLU replayed with another side's
// decisions at near-zero inputs (the harness's isolated backward, or a routed step)
template <typename T>
void relu_backward_routed(T* dinp, const T* dout, const uint8_t* pass, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dinp[i] = pass[i] ? dout[i] : T(0);
}

}  // namespace ssd

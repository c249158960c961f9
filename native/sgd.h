// torch.optim.SGD's update (its single-tensor path, which CPU tensors take), operation for operation:
//   d = grad + weight_decay * param            (grad.add(param, alpha=weight_decay), if weight_decay != 0)
//   buf = d on the first step, else buf * momentum + (1 - dampening) * d   (buf.mul_(momentum).add_(d, alpha=...))
//   d = d + momentum * buf if nesterov, else buf                           (if momentum != 0)
//   param = param - lr * d                     (param.add_(d, alpha=-lr))
// torch's add with alpha computes a + alpha * b with one rounding (a fused multiply-add) and its scalars in the
// tensor's dtype, so both are done here the same way.
#pragma once
#include <cmath>
#include <cstdint>

namespace ssd {

struct SgdConfig {
  double lr = 0.0;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// a + alpha * b, rounded once, as torch's add(a, b, alpha=alpha)
template <typename T>
T add_scaled(T a, T b, T alpha) {
  return std::fma(alpha, b, a);
}

// param (n), grad (n), momentum_buffer (n) -> param, momentum_buffer updated; first: the buffer does not exist yet
template <typename T>
void sgd_update(T* param, const T* grad, T* momentum_buffer, bool first, int64_t n, const SgdConfig& c) {
  const T weight_decay = T(c.weight_decay), momentum = T(c.momentum), keep = T(1.0 - c.dampening), step = T(-c.lr);
  for (int64_t i = 0; i < n; ++i) {
    T d = c.weight_decay != 0.0 ? add_scaled(grad[i], param[i], weight_decay) : grad[i];
    if (c.momentum != 0.0) {
      momentum_buffer[i] = first ? d : add_scaled(momentum_buffer[i] * momentum, d, keep);
      d = c.nesterov ? add_scaled(d, momentum_buffer[i], momentum) : momentum_buffer[i];
    }
    param[i] = add_scaled(param[i], d, step);
  }
}

}  // namespace ssd

// BatchNorm2d in training mode, as torch's CPU kernel computes it (two passes per channel: the batch mean, then the
// sum of squared deviations from it), its backward, and the running statistics' update. A channel's sums run in a
// fixed order (each image's plane, then the planes in batch order), one channel per work item, so the result depends
// neither on the thread count nor on how the batch is split into threads.
#pragma once
#include <cmath>
#include <cstdint>

namespace ssd {

// x (B,C,HW) -> mean (C), var_sum (C): sum over the channel of (x - mean)^2
template <typename T>
void batchnorm_statistics(T* mean, T* var_sum, const T* x, int B, int C, int HW) {
  const T count = T(int64_t(B) * HW);
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; ++c) {
    T total = 0;
    for (int b = 0; b < B; ++b) {
      const T* plane = x + (int64_t(b) * C + c) * HW;
      T plane_sum = 0;
      for (int p = 0; p < HW; ++p) plane_sum += plane[p];
      total += plane_sum;
    }
    const T m = total / count;
    T squares = 0;
    for (int b = 0; b < B; ++b) {
      const T* plane = x + (int64_t(b) * C + c) * HW;
      T plane_sum = 0;
      for (int p = 0; p < HW; ++p) plane_sum += (plane[p] - m) * (plane[p] - m);
      squares += plane_sum;
    }
    mean[c] = m;
    var_sum[c] = squares;
  }
}

// x (B,C,HW), mean (C), invstd (C), gamma (C), beta (C) -> y (B,C,HW) = (x - mean) * invstd * gamma + beta
template <typename T>
void batchnorm_normalize(T* y, const T* x, const T* mean, const T* invstd, const T* gamma, const T* beta, int B, int C,
                         int HW) {
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < int64_t(B) * C; ++plane) {
    const int c = int(plane % C);
    const T scale = invstd[c] * gamma[c], m = mean[c], shift = beta[c];
    const T* in = x + plane * HW;
    T* out = y + plane * HW;
    for (int p = 0; p < HW; ++p) out[p] = (in[p] - m) * scale + shift;
  }
}

// dy (B,C,HW), x (B,C,HW), mean (C), invstd (C), gamma (C) -> dx (B,C,HW) (written), dgamma (C) +=, dbeta (C) +=:
// dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)), xhat = (x - mean) * invstd
template <typename T>
void batchnorm_backward(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean, const T* invstd,
                        const T* gamma, int B, int C, int HW) {
  const T count = T(int64_t(B) * HW);
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; ++c) {
    const T m = mean[c], s = invstd[c];
    T sum_dy = 0, sum_dy_xhat = 0;
    for (int b = 0; b < B; ++b) {
      const int64_t offset = (int64_t(b) * C + c) * HW;
      T plane_dy = 0, plane_dy_xhat = 0;
      for (int p = 0; p < HW; ++p) {
        plane_dy += dy[offset + p];
        plane_dy_xhat += dy[offset + p] * ((x[offset + p] - m) * s);
      }
      sum_dy += plane_dy;
      sum_dy_xhat += plane_dy_xhat;
    }
    dgamma[c] += sum_dy_xhat;
    dbeta[c] += sum_dy;
    const T mean_dy = sum_dy / count, mean_dy_xhat = sum_dy_xhat / count, scale = gamma[c] * s;
    for (int b = 0; b < B; ++b) {
      const int64_t offset = (int64_t(b) * C + c) * HW;
      for (int p = 0; p < HW; ++p) {
        const T xhat = (x[offset + p] - m) * s;
        dx[offset + p] = scale * (dy[offset + p] - mean_dy - xhat * mean_dy_xhat);
      }
    }
  }
}

// running_mean (C), running_var (C) updated from a batch's mean (C) and var_sum (C) over `count` elements per
// channel, as torch: running = (1 - momentum) * running + momentum * batch, the variance unbiased (var_sum / (n-1))
template <typename T>
void batchnorm_update_running(T* running_mean, T* running_var, const T* mean, const T* var_sum, int C, int64_t count,
                              T momentum, bool unbiased = true) {
  const T divisor = T(unbiased ? count - 1 : count);
  for (int c = 0; c < C; ++c) {
    running_mean[c] = (T(1) - momentum) * running_mean[c] + momentum * mean[c];
    running_var[c] = (T(1) - momentum) * running_var[c] + momentum * (var_sum[c] / divisor);
  }
}

}  // namespace ssd

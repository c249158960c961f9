// A classifier's end: global average pooling, a fully connected layer, and the cross-entropy (mean over the batch),
// with their backwards. Small (B x 128 x 10 at ResNet-8): plain loops in a fixed order.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ssd {

// x (B,C,HW) -> out (B,C): the mean of each plane
template <typename T>
void global_avg_pool_forward(T* out, const T* x, int B, int C, int HW) {
  for (int64_t plane = 0; plane < int64_t(B) * C; ++plane) {
    T sum = 0;
    for (int p = 0; p < HW; ++p) sum += x[plane * HW + p];
    out[plane] = sum / T(HW);
  }
}

// dout (B,C) -> dx (B,C,HW) (written): each element of a plane gets dout / HW
template <typename T>
void global_avg_pool_backward(T* dx, const T* dout, int B, int C, int HW) {
  for (int64_t plane = 0; plane < int64_t(B) * C; ++plane) {
    const T g = dout[plane] / T(HW);
    for (int p = 0; p < HW; ++p) dx[plane * HW + p] = g;
  }
}

// x (B,I), weight (O,I), bias (O) -> out (B,O) = x weight^T + bias
template <typename T>
void linear_forward(T* out, const T* x, const T* weight, const T* bias, int B, int I, int O) {
  for (int b = 0; b < B; ++b)
    for (int o = 0; o < O; ++o) {
      T sum = 0;
      for (int i = 0; i < I; ++i) sum += x[int64_t(b) * I + i] * weight[int64_t(o) * I + i];
      out[int64_t(b) * O + o] = sum + bias[o];
    }
}

// dout (B,O), x (B,I), weight (O,I) -> dx (B,I) (written), dweight (O,I) +=, dbias (O) +=
template <typename T>
void linear_backward(T* dx, T* dweight, T* dbias, const T* dout, const T* x, const T* weight, int B, int I, int O) {
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < I; ++i) {
      T sum = 0;
      for (int o = 0; o < O; ++o) sum += dout[int64_t(b) * O + o] * weight[int64_t(o) * I + i];
      dx[int64_t(b) * I + i] = sum;
    }
  for (int o = 0; o < O; ++o) {
    T bias_sum = 0;
    for (int b = 0; b < B; ++b) bias_sum += dout[int64_t(b) * O + o];
    dbias[o] += bias_sum;
    for (int i = 0; i < I; ++i) {
      T sum = 0;
      for (int b = 0; b < B; ++b) sum += dout[int64_t(b) * O + o] * x[int64_t(b) * I + i];
      dweight[int64_t(o) * I + i] += sum;
    }
  }
}

// logits (B,K), labels (B) -> the mean over the batch of logsumexp(logits) - logits[label]; dlogits (B,K) (written) =
// (softmax - onehot) / B. The row maximum is subtracted before exp.
template <typename T>
T cross_entropy_forward_backward(T* dlogits, const T* logits, const int64_t* labels, int B, int K) {
  T total = 0;
  for (int b = 0; b < B; ++b) {
    const T* row = logits + int64_t(b) * K;
    const T top = *std::max_element(row, row + K);
    T sum = 0;
    for (int k = 0; k < K; ++k) sum += std::exp(row[k] - top);
    const T log_sum = std::log(sum);
    total += log_sum + top - row[labels[b]];
    for (int k = 0; k < K; ++k)
      dlogits[int64_t(b) * K + k] = (std::exp(row[k] - top - log_sum) - T(k == labels[b])) / T(B);
  }
  return total / T(B);
}

}  // namespace ssd

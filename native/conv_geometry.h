// A 2-D convolution's shape, and what its forward does with each finished output element.
#pragma once
#include <cstdint>

namespace ssd {

struct ConvGeometry {
  int C, H, W;        // input channels and size
  int OC, KH, KW;     // output channels, kernel size
  int stride, pad, dilation;
  int OH() const { return (H + 2 * pad - dilation * (KH - 1) - 1) / stride + 1; }
  int OW() const { return (W + 2 * pad - dilation * (KW - 1) - 1) / stride + 1; }
  int patch() const { return C * KH * KW; }
  // A 1x1, stride 1, unpadded conv reads its input as the column matrix directly.
  bool is_pointwise() const { return KH == 1 && KW == 1 && stride == 1 && pad == 0; }
};

// What conv2d_forward does with each output element once its sum over the window is complete.
template <typename T>
struct ConvEpilogue {
  const T* bias = nullptr;  // (OC): out = sum + bias
  bool relu = false;        // then out = out > 0 ? out : 0
  bool accumulate = false;  // out += sum instead (an input gradient, which several consumers add into)
};

}  // namespace ssd

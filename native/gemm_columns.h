// Where the packed GEMM's register tiles read row k of a column panel of B (one K block, kc rows, panels of `width`
// columns): from packed panels, or straight from the image for a convolution's panel that needs no packing.
#pragma once
#include <cstdint>

namespace ssd {

// Packed panels: panel p is (kc, width) contiguous at b + p * kc * width.
template <typename T>
struct PackedRows {
  const T* b;
  int64_t panel_stride;  // kc * width
  int width;
  const T* row(int p, int k) const { return b + p * panel_stride + int64_t(k) * width; }
};

// Panels read in place: panel p's row k is `width` consecutive input values at origins[p] + offsets[k] (a stride-1
// convolution's pixels along one output row, every tap inside the image; conv2d.h).
template <typename T>
struct DirectRows {
  const T* const* origins;  // per panel: where its first pixel's window starts in the input (channel 0, tap 0)
  const int64_t* offsets;   // per k of the block: the channel and tap's offset from a window origin
  const T* row(int p, int k) const { return origins[p] + offsets[k]; }
};

}  // namespace ssd

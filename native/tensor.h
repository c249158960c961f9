// A dense, contiguous, row-major array that owns its storage: the only container kernels' callers use.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cache_line_allocator.h"

namespace ssd {

template <typename T>
using Storage = std::vector<T, CacheLineAllocator<T>>;  // 64-byte aligned, grown uninitialized

// Tag of the Tensor constructor that leaves the elements unset, for an output its kernel writes in full.
struct Uninitialized {};

template <typename T>
struct Tensor {
  std::vector<int64_t> shape;
  Storage<T> data;

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> s, T fill = T(0)) : shape(std::move(s)), data(count(shape), fill) {}
  Tensor(std::vector<int64_t> s, Uninitialized) : shape(std::move(s)), data(count(shape)) {}

  static int64_t count(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }
  int64_t numel() const { return static_cast<int64_t>(data.size()); }
  int64_t dim(int i) const { return shape.at(i < 0 ? shape.size() + i : i); }
  T* ptr() { return data.data(); }
  const T* ptr() const { return data.data(); }
};

inline std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// A given array (`what`, as the error names it) must have the expected shape.
inline void require_shape(const std::string& what, const std::vector<int64_t>& shape,
                          const std::vector<int64_t>& expected) {
  if (shape != expected)
    throw std::invalid_argument(what + " has shape " + shape_str(shape) + ", expected " + shape_str(expected));
}

}  // namespace ssd

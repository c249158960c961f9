// A dense, contiguous, row-major array that owns its storage: the only container kernels' callers use.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ssd {

// std::allocator, except that a vector grown without a value leaves its new elements uninitialized: a layer's
// output is written whole by its kernel, and zero-filling it first (one thread, 100 MB per batch-1 forward while the
// other waited) was 1.7% of the forward.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

template <typename T>
using Storage = std::vector<T, DefaultInitAllocator<T>>;

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

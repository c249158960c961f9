// The allocator of every kernel buffer (tensors and scratch): storage starts on a 64-byte cache line, and a vector
// grown without a value leaves its new elements uninitialized.
//
// Alignment: the packed GEMM panels are rows of 64 bytes (16 floats), one zmm (or two ymm) per row. malloc's 16-byte
// alignment put every such row across two cache lines, so each vector load of B was a split load: aligning the
// scratch buffers made the SSD300 forward at batch 1 0.94x its time and the training step at batch 4 0.95x on an
// Intel Xeon (AVX-512, 2 cores; alternating call by call in one process, 12 and 5 rounds).
// Uninitialized growth: a layer's output is written whole by its kernel, and zero-filling it first (one thread,
// 100 MB per batch-1 forward while the other waited) was 1.7% of the forward.
#pragma once
#include <cstddef>
#include <new>
#include <utility>

namespace ssd {

constexpr std::size_t kCacheLine = 64;

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = CacheLineAllocator<U>;
  };
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kCacheLine)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    ::operator delete(p, n * sizeof(T), std::align_val_t(kCacheLine));
  }
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept { return true; }
  template <typename U>
  bool operator!=(const CacheLineAllocator<U>&) const noexcept { return false; }
};

}  // namespace ssd

// Scratch memory for kernels (im2col tiles, column gradients), with a guard region on each side: kGuardElements
// elements holding a canary bit pattern (a signalling NaN no kernel computes). check() runs after every kernel that
// used the buffer and throws, naming the kernel, the side and the first changed element, if a guard was written.
// Such a write lands in memory the process owns (a std::vector's own allocation), so AddressSanitizer cannot see
// it; the guards can. The check is two 64-element comparisons per kernel call, so it stays on in every build.
#pragma once
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cache_line_allocator.h"

namespace ssd {

template <typename T>
class GuardedScratch {
 public:
  static constexpr int64_t kGuardElements = 64;

  // Room for n elements; the contents are unspecified, the guards freshly written.
  T* resize(int64_t n) {
    storage_.resize(size_t(n + 2 * kGuardElements));
    size_ = n;
    fill_guard(storage_.data());
    fill_guard(storage_.data() + kGuardElements + n);
    return data();
  }
  T* data() { return storage_.data() + kGuardElements; }
  int64_t size() const { return size_; }

  void check(const char* kernel) const {
    if (storage_.empty()) return;
    check_guard(storage_.data(), -kGuardElements, kernel, "before the start");
    check_guard(storage_.data() + kGuardElements + size_, size_, kernel, "past the end");
  }

 private:
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  static constexpr Bits kCanary = sizeof(T) == 4 ? Bits(0x7FA5A5A5u) : Bits(0x7FF5A5A5A5A5A5A5ull);

  static void fill_guard(T* guard) {
    for (int64_t i = 0; i < kGuardElements; ++i) std::memcpy(guard + i, &kCanary, sizeof(T));
  }

  // guard: kGuardElements elements, the first at index `first` of the buffer (negative before the start)
  void check_guard(const T* guard, int64_t first, const char* kernel, const char* side) const {
    for (int64_t i = 0; i < kGuardElements; ++i) {
      Bits bits;
      std::memcpy(&bits, guard + i, sizeof(T));
      if (bits != kCanary)
        throw std::logic_error(std::string(kernel) + " wrote " + side + " of its " + std::to_string(size_) +
                               "-element scratch buffer: element " + std::to_string(first + i) + " changed");
    }
  }

  std::vector<T, CacheLineAllocator<T>> storage_;  // data() on a cache line: the guards are 64 elements
  int64_t size_ = 0;
};

}  // namespace ssd

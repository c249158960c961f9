// OpenBLAS (the scipy-openblas32 wheel), opened when first used instead of linked, so that the native module's kernel
// switch reaches OpenBLAS's kernels too. Its DYNAMIC_ARCH build chooses them once, while it loads, from
// OPENBLAS_CORETYPE or from the CPU (SkylakeX, AVX-512, on AMD Zen 4 and Zen 5); linked, it has chosen before any code
// of the module runs. SSD_NATIVE_ISA=avx2 on an AVX-512 CPU (kernel_environment.h) loads it with its Haswell (AVX2)
// kernels, as ONEDNN_MAX_CPU_ISA=AVX2 moves PyTorch: otherwise the weight gradients stayed on AVX-512 under the
// switch. An OPENBLAS_CORETYPE already set wins (some machines set it for older OpenBLAS builds; the choice moves the
// weight-gradient GEMM's rate by 2x on Zen 5: docs/bench.md), and the variable is set only while the library loads,
// so child processes do not inherit it. Where the library is in the process already (the other module on these
// headers), the first choice stays: openblas().core says which kernels run.
#pragma once
#include <cblas.h>
#include <dlfcn.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "gemm_packed.h"

#ifndef SSD_OPENBLAS_LIBRARY
#error "SSD_OPENBLAS_LIBRARY (the path of libscipy_openblas.so) is set by native_build.cmake"
#endif

namespace ssd {

struct OpenBlas {
  decltype(&scipy_cblas_sgemm) sgemm;
  decltype(&scipy_cblas_dgemm) dgemm;
  std::string core;  // the kernels OpenBLAS chose (its corename: "SkylakeX", "Haswell", "Zen", ...)
};

// The OPENBLAS_CORETYPE to load with where none is set: Haswell's kernels where the native GEMM is held to AVX2 on an
// AVX-512 CPU, else none (OpenBLAS's own choice).
inline const char* openblas_core_for(bool avx512_gemm) {
  return cpu_has_avx512() && !avx512_gemm ? "Haswell" : nullptr;
}

template <typename F>
F openblas_symbol(void* library, const char* name) {
  if (void* symbol = dlsym(library, name)) return reinterpret_cast<F>(symbol);
  throw std::runtime_error(std::string("OpenBLAS at " SSD_OPENBLAS_LIBRARY " has no symbol ") + name);
}

// Loads the library on the first call, with the core for the GEMM kernel then in effect, single-threaded (OpenMP
// owns the threads: gemm.h); later calls return the same. Throws, naming the path and the loader's message, where it
// cannot load. A module calls it when it loads, after reading the kernel environment.
inline const OpenBlas& openblas() {
  static const OpenBlas loaded = [] {
    const char* user_core = std::getenv("OPENBLAS_CORETYPE");
    const char* core = user_core ? nullptr : openblas_core_for(avx512_kernel_on().load());
    if (core) setenv("OPENBLAS_CORETYPE", core, 1);
    void* library = dlopen(SSD_OPENBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (core) unsetenv("OPENBLAS_CORETYPE");
    if (!library) throw std::runtime_error(std::string("cannot load OpenBLAS: ") + dlerror());
    openblas_symbol<void (*)(int)>(library, "scipy_openblas_set_num_threads")(1);
    const auto corename = openblas_symbol<const char* (*)()>(library, "scipy_openblas_get_corename");
    return OpenBlas{openblas_symbol<decltype(&scipy_cblas_sgemm)>(library, "scipy_cblas_sgemm"),
                    openblas_symbol<decltype(&scipy_cblas_dgemm)>(library, "scipy_cblas_dgemm"), corename()};
  }();
  return loaded;
}

}  // namespace ssd

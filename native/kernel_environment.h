// The kernel paths the environment asks for, read when a native module loads (every module built on these headers
// holds its own copy of the switches).
#pragma once
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "conv3x3.h"
#include "gemm_packed.h"
#include "weight_grad_gemm.h"

namespace ssd {

// The kernel paths the environment asks for, as PyTorch takes ONEDNN_MAX_CPU_ISA and ATEN_CPU_CAPABILITY:
// SSD_NATIVE_ISA=avx2 keeps the packed GEMM on its AVX2 tile on an AVX-512 machine and the weight gradients on
// OpenBLAS's AVX2 kernels, as on an AVX2 machine (avx512 asks for the wider tile, an error where the CPU lacks it);
// SSD_NATIVE_CONV3X3=0 sends the 3x3 convolutions to the im2col GEMM, which rounds in another order. A value outside these is an error naming it, raised when the module loads.
inline void apply_kernel_environment() {
  if (const char* isa = std::getenv("SSD_NATIVE_ISA")) {
    std::string name(isa);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    if (name != "avx2" && name != "avx512")
      throw std::invalid_argument("SSD_NATIVE_ISA must be 'avx2' or 'avx512', got '" + std::string(isa) + "'");
    if (name == "avx512" && !cpu_has_avx512())
      throw std::invalid_argument("SSD_NATIVE_ISA=avx512: this CPU does not report AVX-512F");
    avx512_kernel_on() = name == "avx512";
    packed_weight_grad_on() = name == "avx512";
  }
  if (const char* conv3x3 = std::getenv("SSD_NATIVE_CONV3X3")) {
    const std::string value(conv3x3);
    if (value != "0" && value != "1")
      throw std::invalid_argument("SSD_NATIVE_CONV3X3 must be 0 or 1, got '" + value + "'");
    conv3x3_kernel_on() = value == "1";
  }
}

}  // namespace ssd

// Fault switches: real porting bugs (the project's catalogue of them) that can be switched on by name at run time,
// so the harness's own tests can prove it catches and localizes each one. All are off by default; a switch is
// process-wide (the kernels are free functions) and read where the bug would live, never inside an inner loop.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace ssd {

enum class Fault : int {
  SoftmaxWithoutMax,      // cross-entropy sums exp(logit) without subtracting the row maximum
  GradIntoOutputBuffer,   // the class-loss gradient is written into (a copy of) the output buffer
  LayerMajorConcat,       // head outputs joined "per source, batch x boxes" instead of per image
  BatchWideMining,        // hard negatives ranked over the whole batch instead of per image
  L2NormWithoutEps,       // x / ||x|| without the eps clamp
  SqrtBackwardWithoutEps, // L2Norm backward divides by ||x|| without autograd's zero-norm guards
  FrozenLayer,            // one layer's (conv8_2's) parameter gradients are never accumulated
  GradsNotZeroed,         // parameter gradients are not zeroed between steps
  AspectRatioOrder,       // the two boxes of each aspect ratio emitted in the wrong order at every location
  SharedPriorWrongOrder,  // forced best-prior matches applied in reverse, so the earlier of two GTs wins
  NegativesOffByOne,      // one hard negative too many per image
  SwappedVariances,       // box encoding weights (5, 5, 10, 10) instead of (10, 10, 5, 5)
  Count
};

inline constexpr std::array<const char*, int(Fault::Count)> kFaultNames = {
    "softmax_without_max", "grad_into_output_buffer", "layer_major_concat", "batch_wide_mining",
    "l2norm_without_eps", "sqrt_backward_without_eps", "frozen_layer", "grads_not_zeroed",
    "aspect_ratio_order", "shared_prior_wrong_order", "negatives_off_by_one", "swapped_variances"};

// The layer FrozenLayer stops learning (state_dict prefix of conv8_2).
inline const std::string kFrozenLayer = "backbone.extra.1.2";

inline std::atomic<uint32_t> g_active_faults{0};

inline bool fault_on(Fault fault) { return g_active_faults.load(std::memory_order_relaxed) & (1u << int(fault)); }

}  // namespace ssd

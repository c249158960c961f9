// Fault switches: real porting bugs (the project's catalogue of them) that can be switched on by name at run time,
// so the harness's own tests can prove it catches and localizes each one. All are off by default; a switch is
// process-wide (the kernels are free functions) and read where the bug would live, never inside an inner loop.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
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
  // The sensitivity ladder: subtle bugs of real ports, each on one layer (kSubtleFaultLayer) or in the loss.
  ConvLastTermDropped,    // one convolution's accumulation stops one term short (its last channel's last tap)
  Bf16Weights,            // one convolution's weights rounded to bfloat16 on a fast path
  Bf16SavedActivations,   // one layer's input saved in bfloat16 for its backward
  BiasChannelOff,         // one output channel's bias off by a relative 1e-3
  BiasAddedTwice,         // one layer's bias added twice
  L2NormEpsInsideSqrt,    // L2Norm as x / sqrt(||x||^2 + eps) instead of x / max(||x||, eps)
  FirstImageNormalizer,   // the loss normalised by the first image's positives instead of the batch's
  ApproximateExp,         // a fast exp with a relative error of about 1e-4 in the softmax
  RightPaddingOffByOne,   // one convolution's right-border padding starts a column early: its last input column reads 0
  NesterovMomentum,       // the SGD update takes Nesterov momentum where the reference has plain momentum
  LossSumFloatInOrder,    // the loss sums accumulated in float, in order (inside float32's error model: must pass)
  // Decision boundaries (the decision_boundaries scenario sits exactly on them).
  IouThresholdStrict,     // a prior matched at IoU > 0.5 instead of >= 0.5
  GtTieLastWins,          // a prior with two GTs of equal IoU takes the last instead of the first
  Count
};

inline constexpr std::array<const char*, int(Fault::Count)> kFaultNames = {
    "softmax_without_max", "grad_into_output_buffer", "layer_major_concat", "batch_wide_mining",
    "l2norm_without_eps", "sqrt_backward_without_eps", "frozen_layer", "grads_not_zeroed",
    "aspect_ratio_order", "shared_prior_wrong_order", "negatives_off_by_one", "swapped_variances",
    "conv_last_term_dropped", "bf16_weights", "bf16_saved_activations", "bias_channel_off", "bias_added_twice", "l2norm_eps_inside_sqrt",
    "first_image_normalizer", "approximate_exp", "right_padding_off_by_one", "nesterov_momentum",
    "loss_sum_float_in_order",
    "iou_threshold_strict", "gt_tie_last_wins"};

// The layer FrozenLayer stops learning (state_dict prefix of conv8_2).
inline const std::string kFrozenLayer = "backbone.extra.1.2";

// The layer the convolution faults of the ladder break (state_dict prefix of conv2_1).
inline const std::string kSubtleFaultLayer = "backbone.features.5";

inline std::atomic<uint32_t> g_active_faults{0};

// Round to the nearest bfloat16 (8 significant bits, ties to even), as a bf16 fast path stores its weights.
inline float round_to_bfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u) return value;  // infinity or NaN
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&value, &bits, sizeof bits);
  return value;
}

inline bool fault_on(Fault fault) { return g_active_faults.load(std::memory_order_relaxed) & (1u << int(fault)); }

}  // namespace ssd

// ResNet-8's fault switches: the bugs BatchNorm ports have, switched on by name so the harness's tests can prove it
// catches and localizes each one. Off by default; process-wide; read where the bug would live.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>

namespace ssd::resnet8 {

enum class Fault : int {
  BiasedRunningVar,     // the running variance updated with the biased batch variance (/ n instead of / (n - 1))
  InvertedBnMomentum,   // the running statistics kept with weight 0.1 and the batch's taken with 0.9
  EpsOutsideSqrt,       // 1 / (sqrt(var) + eps) instead of 1 / sqrt(var + eps)
  EvalStatsInTraining,  // the training forward normalizes with the running statistics, not the batch's
  ResidualAfterRelu,    // a block adds its shortcut after the ReLU (relu(bn2) + identity) instead of before it
  Count
};

inline constexpr std::array<const char*, int(Fault::Count)> kFaultNames = {
    "biased_running_var", "inverted_bn_momentum", "eps_outside_sqrt", "eval_stats_in_training",
    "residual_after_relu"};

inline std::atomic<uint32_t> g_active_faults{0};

inline bool fault_on(Fault fault) { return g_active_faults.load(std::memory_order_relaxed) & (1u << int(fault)); }

}  // namespace ssd::resnet8

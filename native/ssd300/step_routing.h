// Another run's decisions at near-ties, taken by a training step at exactly the masked places. The harness runs
// the float64 native step with the float32 native step's near-ties (models/ssd300/routing_ties.py), so that the float64
// reference backward routed that way serves both native sides. Elsewhere every decision is the step's own; the
// forward values never change (only the gradient's route and, for mining, the loss sums).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "tensor.h"

namespace ssd {

struct StepRouting {
  // A max-pool window sends its gradient to `choice` (B,C,OH,OW; a flat index into the window's input plane)
  // where `mask` (same shape, 0/1) is set.
  struct Pool {
    Tensor<int64_t> choice;
    Tensor<uint8_t> mask;
  };
  // A ReLU passes the gradient where `force_pass` is set and blocks it where `force_block` is set (B,C,H,W, 0/1).
  struct Relu {
    Tensor<uint8_t> force_pass, force_block;
  };
  // The hard negatives (B,P, 0/1) taken where `mask` (B,P) is set.
  struct Mining {
    Tensor<uint8_t> negatives, mask;
  };
  std::map<std::string, Pool> pools;  // by pool tap
  std::map<std::string, Relu> relus;  // by ReLU tap (a conv's post-ReLU output)
  std::optional<Mining> mining;
};

}  // namespace ssd

// Model<T>::check_routing and route_backward: a training step that takes another run's near-tie decisions
// (step_routing.h). The routing is checked against the batch before the step runs.
#pragma once
#include <algorithm>

namespace ssd {

// The backbone op producing `tap` (nullptr if none does)
template <typename T>
const Op* Model<T>::backbone_op(const std::string& tap) const {
  const auto op = std::find_if(backbone_.begin(), backbone_.end(), [&](const Op& o) { return o.out == tap; });
  return op == backbone_.end() ? nullptr : &*op;
}

template <typename T>
bool Model<T>::is_relu_output(const std::string& tap) const {
  const Op* op = backbone_op(tap);
  return op != nullptr && op->kind == OpKind::Conv && op->relu;
}

template <typename T>
void Model<T>::check_routing(const StepRouting& routing, int64_t batch) const {
  for (const auto& [tap, pool] : routing.pools) {
    const Op* op = backbone_op(tap);
    if (op == nullptr || op->kind != OpKind::MaxPool)
      throw std::invalid_argument("routing names '" + tap + "' as a pool, which is not a max-pool's output");
    const std::vector<int64_t> expected = expected_shape(tap, batch);
    require_shape("routing['" + tap + "'] choice", pool.choice.shape, expected);
    require_shape("routing['" + tap + "'] mask", pool.mask.shape, expected);
    const MapShape in = shapes_.at(op->in);
    for (int64_t i = 0; i < pool.choice.numel(); ++i)
      if (pool.mask.data[i]) require_in_plane("routing['" + tap + "'] choice", pool.choice.data[i], in);
  }
  for (const auto& [tap, relu] : routing.relus) {
    if (!is_relu_output(tap))
      throw std::invalid_argument("routing names '" + tap + "' as a ReLU, which is not a ReLU's output");
    const std::vector<int64_t> expected = expected_shape(tap, batch);
    require_shape("routing['" + tap + "'] force_pass", relu.force_pass.shape, expected);
    require_shape("routing['" + tap + "'] force_block", relu.force_block.shape, expected);
  }
  if (routing.mining) {
    const std::vector<int64_t> expected{batch, priors_.count()};
    require_shape("routing['mining.negatives'] negatives", routing.mining->negatives.shape, expected);
    require_shape("routing['mining.negatives'] mask", routing.mining->mask.shape, expected);
  }
}

// After the forward: the routing's pool windows and ReLUs replace the step's own decisions where masked, so the
// backward routes the gradient there as the other run did.
template <typename T>
void Model<T>::route_backward(const StepRouting& routing) {
  for (const auto& [tap, pool] : routing.pools) {
    std::vector<int32_t>& argmax = pool_argmax_.at(tap);
    for (size_t i = 0; i < argmax.size(); ++i)
      if (pool.mask.data[i]) argmax[i] = int32_t(pool.choice.data[i]);
  }
  for (const auto& [tap, relu] : routing.relus) {
    const Tensor<T>& y = taps_.at(tap);
    Tensor<uint8_t> pass(y.shape);
    for (int64_t i = 0; i < y.numel(); ++i)
      pass.data[i] = (y.data[i] > T(0) || relu.force_pass.data[i]) && !relu.force_block.data[i];
    relu_pass_[tap] = std::move(pass);
  }
}

}  // namespace ssd

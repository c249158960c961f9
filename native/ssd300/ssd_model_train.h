// Model<T>::sgd_step: the optimizer update after backward, with momentum buffers kept in the model as
// torch.optim.SGD keeps them in its state.
#pragma once
#include <stdexcept>

namespace ssd {

// torch.optim.SGD's own argument checks, with its messages
inline void check_sgd_config(const SgdConfig& c) {
  if (!(c.lr >= 0.0) || !std::isfinite(c.lr)) throw std::invalid_argument("Invalid learning rate: " + std::to_string(c.lr));
  if (!(c.momentum >= 0.0)) throw std::invalid_argument("Invalid momentum value: " + std::to_string(c.momentum));
  if (!(c.weight_decay >= 0.0))
    throw std::invalid_argument("Invalid weight_decay value: " + std::to_string(c.weight_decay));
  if (c.nesterov && (c.momentum <= 0.0 || c.dampening != 0.0))
    throw std::invalid_argument("Nesterov momentum requires a momentum and zero dampening");
}

template <typename T>
void Model<T>::sgd_step(const SgdConfig& config) {
  check_sgd_config(config);
  SgdConfig update = config;
  if (fault_on(Fault::NesterovMomentum) && config.momentum > 0.0 && config.dampening == 0.0) update.nesterov = true;
  if (param_grads_.size() != weights_.size())
    throw std::logic_error("sgd_step needs the parameter gradients of a training step; run one first");
  for (auto& [key, w] : weights_) {
    const bool first = !momentum_.count(key);
    Tensor<T>& buffer = momentum_[key];
    if (first) buffer = Tensor<T>(w.shape);
    sgd_update(w.ptr(), param_grads_.at(key).ptr(), buffer.ptr(), first, w.numel(), update);
  }
  // torch keeps no buffer without momentum
  if (config.momentum == 0.0) momentum_.clear();
  inference_packed_.clear();  // packed from the weights before this update
}

}  // namespace ssd

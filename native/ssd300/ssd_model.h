// The native SSD300: weights loaded by state_dict name, a forward pass that keeps every tap for the harness.
#pragma once
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "box_coder.h"
#include "box_iou.h"
#include "conv2d.h"
#include "default_boxes.h"
#include "head_concat.h"
#include "l2norm.h"
#include "maxpool.h"
#include "multibox_loss.h"
#include "relu.h"
#include "sgd.h"
#include "ssd_graph.h"
#include "ssd_matcher.h"
#include "step_routing.h"
#include "tensor.h"

namespace ssd {

struct MapShape {
  int C, H, W;
};

template <typename T>
class Model {
 public:
  using Weights = std::map<std::string, Tensor<T>>;

  // Every key of the graph must be present with a consistent shape, and no other key: a mismatch is an error
  // naming the key, never a skip.
  explicit Model(Weights weights, int image_size = 300);

  // images (B,3,S,S) -> every forward tap, kept in the model; names in execution order from tap_order().
  // inference: a deployed model's forward, whose weights do not change between calls: each convolution's packed
  // weights are kept for the next such call (sgd_step drops them). Measured at SSD300 batch 1: 413-430 ms ->
  // 398-407 ms; a training step packs afresh, so its memory stays as it was.
  void forward(const Tensor<T>& images, bool inference = false);

  // Only the stage that produces tap `name` (a backbone op, a head conv, a head join, the priors, or a loss stage: matching,
  // class loss, mining, loss sums), fed `inputs` (tap name -> value, e.g. the reference's) instead of this model's
  // own upstream: the stage's own error, not the inherited one. The stage's outputs are recorded as taps
  // (tap_order()). Matching also needs the ground truth (boxes, labels); other stages ignore it.
  void isolated(const std::string& name, std::map<std::string, Tensor<T>> inputs,
                std::map<std::string, Tensor<int64_t>> index_inputs, const std::vector<Tensor<T>>& boxes,
                const std::vector<std::vector<int64_t>>& labels);

  // Every backward stage alone: the forward state is the given taps (every forward and loss tap), each stage
  // starts from the given gradient of its output ("grads", tap -> d loss / d tap); max-pool windows route by the
  // native side's own choice on the given input, except where a given pool_argmax holds one (-1: its own), and
  // replayed ReLUs as given. Records, per tap, the gradient its consumers produced (isolated_grad) and every
  // parameter gradient (param_grad).
  void isolated_backward(std::map<std::string, Tensor<T>> taps, std::map<std::string, Tensor<int64_t>> index_taps,
                         const std::map<std::string, Tensor<T>>& grads,
                         const std::map<std::string, Tensor<int64_t>>& pool_argmax,
                         std::map<std::string, Tensor<uint8_t>> relu_pass);
  const std::vector<std::string>& isolated_grad_order() const { return isolated_grad_order_; }

  // After forward: per image, boxes (n,4) xyxy pixels and labels (n) -> matching, targets, per-prior losses,
  // mined negatives and the three losses, recorded as taps. Boxes and labels are validated by the caller.
  // forced_negatives: another run's hard negatives, taken where masked (step_routing.h) before the loss sums.
  void loss(const std::vector<Tensor<T>>& boxes, const std::vector<std::vector<int64_t>>& labels,
            const StepRouting::Mining* forced_negatives = nullptr);

  // A step that takes another run's near-tie decisions: check_routing before the step (every tap, shape and
  // index against this batch), route_backward between loss and backward (pool windows and ReLUs).
  void check_routing(const StepRouting& routing, int64_t batch) const;
  void route_backward(const StepRouting& routing);

  // After loss: d loss.total / d every tap ("grad/<tap>") and every parameter ("param_grad/<key>"), recorded.
  // Parameter gradients are zeroed here, once per step.
  // keep_tap_grads: keep d loss / d every tap for the caller; keep_taps: keep every forward output (a training
  // step needs neither: only the parameter gradients and the losses)
  void backward(bool keep_tap_grads = true, bool keep_taps = true);

  // After backward: every weight updated from its parameter gradient as torch.optim.SGD does (momentum buffers
  // kept here, created on the first step).
  void sgd_step(const SgdConfig& config);
  const Tensor<T>& weight_value(const std::string& key) const { return weights_.at(key); }
  bool has_momentum(const std::string& key) const { return momentum_.count(key) > 0; }
  const Tensor<T>& momentum_buffer(const std::string& key) const { return momentum_.at(key); }

  const std::vector<std::string>& tap_order() const { return tap_order_; }
  const Tensor<T>& tap(const std::string& name) const { return taps_.at(name); }
  bool is_index_tap(const std::string& name) const { return index_taps_.count(name) > 0; }
  bool has_grad(const std::string& tap) const { return grads_.count(tap) > 0; }
  const Tensor<T>& param_grad(const std::string& key) const { return param_grads_.at(key); }

  // Handing a recorded trace to the caller: each tensor is moved out (once), then drop_trace() forgets every
  // recorded tensor, so a large trace is never held twice. Weights, parameter gradients and momentum stay (sgd_step
  // reads the parameter gradients of the last step).
  Tensor<T> take_tap(const std::string& name) { return std::move(taps_.at(name)); }
  Tensor<int64_t> take_index_tap(const std::string& name) { return std::move(index_taps_.at(name)); }
  Tensor<T> take_grad(const std::string& tap) { return std::move(grads_.at(tap)); }
  Tensor<T> take_isolated_grad(const std::string& tap) { return std::move(isolated_grads_.at(tap)); }
  void drop_trace() { reset(); }

  int num_classes() const { return num_classes_; }
  int image_size() const { return image_size_; }
  int64_t num_priors() const { return priors_.count(); }
  std::vector<std::string> weight_names() const;

 private:
  const Tensor<T>& weight(const std::string& key) const { return weights_.at(key); }
  void check_conv_weight(const std::string& prefix, int in_channels, int kernel, int expect_out = -1) const;
  ConvGeometry conv_geometry(const std::string& prefix, const MapShape& in, int stride, int pad, int dil) const;
  void run_conv(const std::string& out, const std::string& in, const std::string& prefix, int stride, int pad,
                int dil, bool relu);
  void record(const std::string& name, Tensor<T> value);
  void reset();
  void run_op(const Op& op);
  std::pair<Tensor<T>, Tensor<T>> run_head_pair(int k);
  void join_head(bool loc);
  void make_priors();
  void record_index(const std::string& name, Tensor<int64_t> value);
  void l2norm_stage(const Op& op, Tensor<T>& y);
  void pool_stage(const Op& op, Tensor<T>& y);
  std::vector<int64_t> expected_shape(const std::string& tap, int64_t batch) const;
  void check_given(const std::string& stage, const std::string& tap, int64_t batch) const;
  bool is_relu_output(const std::string& tap) const;
  const Op* backbone_op(const std::string& tap) const;
  void match_stage(const std::vector<Tensor<T>>& boxes, const std::vector<std::vector<int64_t>>& labels);
  void class_loss_stage();
  void mining_stage();
  void loss_sums_stage();
  T loss_normalizer() const;
  Tensor<T>& grad(const std::string& tap);
  Tensor<T>& take_output_grad(const std::string& tap);
  Storage<T> consume_output_grad(const std::string& tap);
  void release_tap(const std::string& tap);
  void conv_backward(const std::string& out, const std::string& in, const std::string& prefix, int stride, int pad,
                     int dil, bool relu);
  void head_backward();
  void head_pair_backward(int k);
  void backbone_backward();

  Weights weights_;
  int image_size_;
  std::vector<Op> backbone_ = ssd300_backbone();
  HeadSpec heads_ = ssd300_heads();
  PriorConfig priors_ = ssd300_priors();
  std::map<std::string, MapShape> shapes_;  // per tap, for one image, inferred from the weights
  int num_classes_ = 0;

  std::map<std::string, Tensor<T>> taps_;
  std::map<std::string, std::vector<int32_t>> pool_argmax_;  // kept for backward
  std::map<std::string, Tensor<T>> l2norm_norm_;             // per-pixel norms, kept for backward
  std::map<std::string, Tensor<int64_t>> index_taps_;        // match.*, mining.* (0/1)
  std::map<std::string, Tensor<T>> grads_;                   // d loss / d tap, by tap name
  bool keep_tap_grads_ = true, keep_taps_ = true;
  std::map<std::string, Tensor<T>> param_grads_;             // d loss / d weight, by state_dict key
  std::map<std::string, Tensor<T>> momentum_;                // SGD momentum buffers, by state_dict key
  // ReLU decisions replayed by the backward (an isolated backward, or a routed step), by tap: 1 where it passes.
  std::map<std::string, Tensor<uint8_t>> relu_pass_;
  // Isolated backward only: the reference's output gradients, and the results.
  const std::map<std::string, Tensor<T>>* replay_grads_ = nullptr;
  std::map<std::string, Tensor<T>> isolated_grads_;
  std::vector<std::string> isolated_grad_order_;
  std::vector<std::string> tap_order_;
  // Conv scratch, reused across layers
  GuardedScratch<T> packed_weight_;
  bool inference_ = false;                                 // within forward(images, inference=true)
  std::map<std::string, GuardedScratch<T>> inference_packed_;  // per conv prefix: its weights packed, while unchanged
  ConvBackwardScratch<T> backward_scratch_;
};

}  // namespace ssd

#include "ssd_model_impl.h"
#include "ssd_model_loss.h"
#include "ssd_model_backward.h"
#include "ssd_model_isolated.h"
#include "ssd_model_routing.h"
#include "ssd_model_train.h"

// The native SSD300: weights loaded by state_dict name, a forward pass that keeps every tap for the harness.
#pragma once
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "conv2d.h"
#include "default_boxes.h"
#include "head_concat.h"
#include "l2norm.h"
#include "maxpool.h"
#include "relu.h"
#include "ssd_graph.h"
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

  // images (B,3,S,S) -> every forward tap, kept in the model; names in execution order from tap_order()
  void forward(const Tensor<T>& images);

  const std::vector<std::string>& tap_order() const { return tap_order_; }
  const Tensor<T>& tap(const std::string& name) const { return taps_.at(name); }
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

  Weights weights_;
  int image_size_;
  std::vector<Op> backbone_ = ssd300_backbone();
  HeadSpec heads_ = ssd300_heads();
  PriorConfig priors_ = ssd300_priors();
  std::map<std::string, MapShape> shapes_;  // per tap, for one image, inferred from the weights
  int num_classes_ = 0;

  std::map<std::string, Tensor<T>> taps_;
  std::map<std::string, std::vector<int32_t>> pool_argmax_;  // kept for backward
  std::map<std::string, Tensor<T>> l2norm_denom_;            // kept for backward
  std::vector<std::string> tap_order_;
  std::vector<T> scratch_;
};

}  // namespace ssd

#include "ssd_model_impl.h"

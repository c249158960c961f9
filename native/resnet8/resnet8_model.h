// ResNet-8 (torchvision's BasicBlock, widths 32/64/128, 32x32 images, 10 classes) on the shared kernels: one
// training step (forward with BatchNorm in training mode, cross-entropy, backward, SGD with momentum), every tap kept
// for the harness. Names are the reference's (models/resnet8/reference.py): taps by module path, parameters and
// buffers by state_dict key.
#pragma once
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "batchnorm.h"
#include "classifier.h"
#include "conv2d.h"
#include "resnet8/resnet8_faults.h"
#include "sgd.h"
#include "tensor.h"

namespace ssd::resnet8 {

constexpr int kImageSize = 32, kNumClasses = 10;
constexpr int kWidths[3] = {32, 64, 128};
constexpr double kBnEps = 1e-5, kBnMomentum = 0.1;

// One stage of the forward: what it computes, from which taps, into which tap, with which parameters.
enum class StageKind { Conv, BatchNorm, Relu, Add, AvgPool, Linear };
struct Stage {
  StageKind kind;
  std::string tap;                // the tap it writes
  std::vector<std::string> inputs;  // the taps it reads ("images": the input batch)
  std::string module;             // state_dict prefix of its parameters ("" for none)
  ConvGeometry conv{};            // Conv only (at batch 1: B is the batch's)
};

// The network as stages in execution order (BasicBlock.forward, spelled out as the reference's taps).
inline std::vector<Stage> build_stages() {
  std::vector<Stage> stages;
  auto conv = [&](const std::string& tap, const std::string& in, int C, int H, int OC, int k, int stride) {
    stages.push_back({StageKind::Conv, tap, {in}, tap, ConvGeometry{C, H, H, OC, k, k, stride, k / 2, 1}});
  };
  auto bn = [&](const std::string& tap, const std::string& in) { stages.push_back({StageKind::BatchNorm, tap, {in}, tap}); };
  auto relu = [&](const std::string& tap, const std::string& in) { stages.push_back({StageKind::Relu, tap, {in}, ""}); };
  conv("conv1", "images", 3, kImageSize, kWidths[0], 3, 1);
  bn("bn1", "conv1");
  relu("relu", "bn1");
  std::string x = "relu";
  int C = kWidths[0], H = kImageSize;
  for (int layer = 0; layer < 3; ++layer) {
    const std::string p = "layer" + std::to_string(layer + 1) + ".0.";
    const int OC = kWidths[layer], stride = layer == 0 ? 1 : 2, OH = H / stride;
    conv(p + "conv1", x, C, H, OC, 3, stride);
    bn(p + "bn1", p + "conv1");
    relu(p + "relu1", p + "bn1");
    conv(p + "conv2", p + "relu1", OC, OH, OC, 3, 1);
    bn(p + "bn2", p + "conv2");
    std::string identity = x;
    if (stride != 1 || C != OC) {
      conv(p + "downsample.0", x, C, H, OC, 1, stride);
      bn(p + "downsample.1", p + "downsample.0");
      identity = p + "downsample.1";
    }
    stages.push_back({StageKind::Add, p + "add", {p + "bn2", identity}, ""});
    relu(p + "out", p + "add");
    x = p + "out";
    C = OC;
    H = OH;
  }
  stages.push_back({StageKind::AvgPool, "avgpool", {x}, ""});
  stages.push_back({StageKind::Linear, "fc", {"avgpool"}, "fc"});
  return stages;
}

template <typename T>
class Model {
 public:
  using Weights = std::map<std::string, Tensor<T>>;
  using Trace = std::vector<std::pair<std::string, Tensor<T>>>;

  // weights: every parameter and running statistic by state_dict key; batches_tracked: each BatchNorm's
  // num_batches_tracked (the one integer buffer), by key
  Model(Weights weights, std::map<std::string, int64_t> batches_tracked)
      : stages_(build_stages()), weights_(std::move(weights)), batches_tracked_(std::move(batches_tracked)) {
    for (const Stage& s : stages_) {
      if (s.kind == StageKind::Conv) expect(s.module + ".weight", {s.conv.OC, s.conv.C, s.conv.KH, s.conv.KW});
      if (s.kind == StageKind::BatchNorm) {
        const int64_t C = channels_of(s);
        for (const char* part : {".weight", ".bias", ".running_mean", ".running_var"}) expect(s.module + part, {C});
        if (!batches_tracked_.count(s.module + ".num_batches_tracked"))
          throw std::invalid_argument("state_dict lacks '" + s.module + ".num_batches_tracked'");
      }
      if (s.kind == StageKind::Linear) {
        expect("fc.weight", {kNumClasses, kWidths[2]});
        expect("fc.bias", {kNumClasses});
      }
    }
    for (const auto& [key, value] : weights_)
      if (!expected_.count(key)) throw std::invalid_argument("unexpected state_dict key '" + key + "'");
  }

  // images (B,3,32,32), labels (B) -> the whole trace of one training step, in the reference's order: forward taps,
  // "loss", gradients in backward order (each layer's parameter gradients after its output's), then param/<key>,
  // buffer/<key> and momentum/<key> after the update
  Trace train_step(const Tensor<T>& images, const std::vector<int64_t>& labels, const SgdConfig& sgd) {
    const int B = int(images.dim(0));
    std::map<std::string, Tensor<T>> taps;
    taps["images"] = images;
    for (const Stage& s : stages_) taps[s.tap] = forward(s, taps, B);
    Tensor<T> dlogits(taps["fc"].shape, Uninitialized{});
    Tensor<T> loss({}, cross_entropy_forward_backward(dlogits.ptr(), taps["fc"].ptr(), labels.data(), B, kNumClasses));

    std::map<std::string, Tensor<T>> grads, param_grads;
    for (const Stage& s : stages_) grads[s.tap] = Tensor<T>(taps[s.tap].shape);
    for (const auto& [key, value] : weights_)
      if (is_parameter(key)) param_grads[key] = Tensor<T>(value.shape);
    grads["fc"] = std::move(dlogits);
    for (auto s = stages_.rbegin(); s != stages_.rend(); ++s) backward(*s, taps, grads, param_grads, B);

    Trace trace;
    for (const Stage& s : stages_) trace.emplace_back(s.tap, std::move(taps[s.tap]));
    trace.emplace_back("loss", std::move(loss));
    for (auto s = stages_.rbegin(); s != stages_.rend(); ++s) {
      trace.emplace_back("grad/" + s->tap, std::move(grads[s->tap]));
      for (const std::string& key : parameters_of(*s)) trace.emplace_back("param_grad/" + key, param_grads[key]);
    }
    update(param_grads, sgd);
    for (const auto& [key, value] : weights_)
      trace.emplace_back((is_parameter(key) ? "param/" : "buffer/") + key, value);
    for (const auto& [key, value] : momentum_) trace.emplace_back("momentum/" + key, value);
    return trace;
  }

  const Weights& weights() const { return weights_; }
  const std::map<std::string, int64_t>& batches_tracked() const { return batches_tracked_; }

 private:
  struct BatchNormSaved {
    Tensor<T> mean, invstd;  // what the forward normalized with (C)
    bool eval_statistics = false;  // the running statistics (EvalStatsInTraining)
  };

  void expect(const std::string& key, const std::vector<int64_t>& shape) {
    expected_[key] = true;
    auto it = weights_.find(key);
    if (it == weights_.end()) throw std::invalid_argument("state_dict lacks '" + key + "'");
    require_shape("state_dict['" + key + "']", it->second.shape, shape);
  }

  // A block's last ReLU (its tap "<layer>.0.out"), which ResidualAfterRelu moves before the add
  static bool is_block_output(const Stage& s) {
    const std::string suffix = ".out";
    return s.tap.size() > suffix.size() && s.tap.compare(s.tap.size() - suffix.size(), suffix.size(), suffix) == 0;
  }

  static bool is_parameter(const std::string& key) {
    return key.find("running_") == std::string::npos;
  }

  int64_t channels_of(const Stage& bn) const {
    for (const Stage& s : stages_)
      if (s.tap == bn.inputs[0]) return s.conv.OC;
    throw std::logic_error("BatchNorm without a convolution before it: " + bn.tap);
  }

  std::vector<std::string> parameters_of(const Stage& s) const {
    if (s.kind == StageKind::Conv) return {s.module + ".weight"};
    if (s.kind == StageKind::BatchNorm || s.kind == StageKind::Linear) return {s.module + ".weight", s.module + ".bias"};
    return {};
  }

  Tensor<T>& weight(const std::string& key) { return weights_.at(key); }

  Tensor<T> forward(const Stage& s, std::map<std::string, Tensor<T>>& taps, int B) {
    const Tensor<T>& x = taps.at(s.inputs[0]);
    switch (s.kind) {
      case StageKind::Conv: {
        Tensor<T> out({B, s.conv.OC, s.conv.OH(), s.conv.OW()}, Uninitialized{});
        conv2d_forward(out.ptr(), x.ptr(), B, weight(s.module + ".weight").ptr(), s.conv, packed_[s.tap],
                       ConvEpilogue<T>{});
        return out;
      }
      case StageKind::BatchNorm:
        return batchnorm_forward(s, x);
      case StageKind::Relu: {
        // ResidualAfterRelu: the ReLU moved before the add (applied to bn2 there), none after it
        if (fault_on(Fault::ResidualAfterRelu) && is_block_output(s)) return x;
        Tensor<T> out(x.shape, Uninitialized{});
        for (int64_t i = 0; i < x.numel(); ++i) out.data[i] = x.data[i] > T(0) ? x.data[i] : T(0);
        return out;
      }
      case StageKind::Add: {
        const Tensor<T>& identity = taps.at(s.inputs[1]);
        const bool relu_first = fault_on(Fault::ResidualAfterRelu);
        Tensor<T> out(x.shape, Uninitialized{});
        for (int64_t i = 0; i < x.numel(); ++i) {
          const T a = relu_first && x.data[i] < T(0) ? T(0) : x.data[i];
          out.data[i] = a + identity.data[i];
        }
        return out;
      }
      case StageKind::AvgPool: {
        Tensor<T> out({B, x.dim(1)}, Uninitialized{});
        global_avg_pool_forward(out.ptr(), x.ptr(), B, int(x.dim(1)), int(x.dim(2) * x.dim(3)));
        return out;
      }
      case StageKind::Linear: {
        Tensor<T> out({B, kNumClasses}, Uninitialized{});
        linear_forward(out.ptr(), x.ptr(), weight("fc.weight").ptr(), weight("fc.bias").ptr(), B, int(x.dim(1)),
                       kNumClasses);
        return out;
      }
    }
    throw std::logic_error("unknown stage kind");
  }

  // BatchNorm in training mode: batch statistics normalize, and the running statistics are updated from them
  Tensor<T> batchnorm_forward(const Stage& s, const Tensor<T>& x) {
    const int B = int(x.dim(0)), C = int(x.dim(1)), HW = int(x.dim(2) * x.dim(3));
    const int64_t count = int64_t(B) * HW;
    Tensor<T> mean({C}, Uninitialized{}), var_sum({C}, Uninitialized{}), invstd({C}, Uninitialized{});
    batchnorm_statistics(mean.ptr(), var_sum.ptr(), x.ptr(), B, C, HW);
    Tensor<T>& running_mean = weight(s.module + ".running_mean");
    Tensor<T>& running_var = weight(s.module + ".running_var");
    BatchNormSaved& saved = saved_[s.tap];
    saved.eval_statistics = fault_on(Fault::EvalStatsInTraining);
    saved.mean = saved.eval_statistics ? running_mean : mean;
    const Tensor<T>& variance_source = saved.eval_statistics ? running_var : var_sum;
    const T divisor = saved.eval_statistics ? T(1) : T(count);
    for (int c = 0; c < C; ++c) {
      const T var = variance_source.data[c] / divisor;
      invstd.data[c] = fault_on(Fault::EpsOutsideSqrt) ? T(1) / (std::sqrt(var) + T(kBnEps))
                                                       : T(1) / std::sqrt(var + T(kBnEps));
    }
    saved.invstd = invstd;
    Tensor<T> out(x.shape, Uninitialized{});
    batchnorm_normalize(out.ptr(), x.ptr(), saved.mean.ptr(), saved.invstd.ptr(), weight(s.module + ".weight").ptr(),
                        weight(s.module + ".bias").ptr(), B, C, HW);
    const T momentum = T(fault_on(Fault::InvertedBnMomentum) ? 1.0 - kBnMomentum : kBnMomentum);
    batchnorm_update_running(running_mean.ptr(), running_var.ptr(), mean.ptr(), var_sum.ptr(), C, count, momentum,
                             /*unbiased=*/!fault_on(Fault::BiasedRunningVar));
    batches_tracked_.at(s.module + ".num_batches_tracked") += 1;
    return out;
  }

  // Adds the stage's input gradients into grads and its parameter gradients into param_grads.
  void backward(const Stage& s, std::map<std::string, Tensor<T>>& taps, std::map<std::string, Tensor<T>>& grads,
                std::map<std::string, Tensor<T>>& param_grads, int B) {
    const Tensor<T>& dout = grads.at(s.tap);
    const std::string& in = s.inputs[0];
    const bool needs_input_grad = in != "images";
    switch (s.kind) {
      case StageKind::Conv:
        conv2d_backward(needs_input_grad ? grads.at(in).ptr() : static_cast<T*>(nullptr),
                        param_grads.at(s.module + ".weight").ptr(), static_cast<T*>(nullptr), dout.ptr(),
                        taps.at(in).ptr(), B, weight(s.module + ".weight").ptr(), s.conv, backward_scratch_[s.tap]);
        return;
      case StageKind::BatchNorm: {
        const Tensor<T>& x = taps.at(in);
        const int C = int(x.dim(1)), HW = int(x.dim(2) * x.dim(3));
        const BatchNormSaved& saved = saved_.at(s.tap);
        Tensor<T> dx(x.shape, Uninitialized{});
        T* dgamma = param_grads.at(s.module + ".weight").ptr();
        T* dbeta = param_grads.at(s.module + ".bias").ptr();
        if (saved.eval_statistics) {  // the statistics taken as constants: dx = gamma * invstd * dy
          Tensor<T> zero({C}), ones({C}, T(1));
          Tensor<T> xhat(x.shape, Uninitialized{});
          batchnorm_normalize(xhat.ptr(), x.ptr(), saved.mean.ptr(), saved.invstd.ptr(), ones.ptr(), zero.ptr(), B, C, HW);
          for (int64_t i = 0; i < x.numel(); ++i) {
            const int c = int(i / HW % C);
            dx.data[i] = weight(s.module + ".weight").data[c] * saved.invstd.data[c] * dout.data[i];
            dgamma[c] += dout.data[i] * xhat.data[i];
            dbeta[c] += dout.data[i];
          }
        } else {
          batchnorm_backward(dx.ptr(), dgamma, dbeta, dout.ptr(), x.ptr(), saved.mean.ptr(), saved.invstd.ptr(),
                             weight(s.module + ".weight").ptr(), B, C, HW);
        }
        add_into(grads.at(in), dx);
        return;
      }
      case StageKind::Relu: {
        const Tensor<T>& out = taps.at(s.tap);
        Tensor<T>& dx = grads.at(in);
        const bool passes_all = fault_on(Fault::ResidualAfterRelu) && is_block_output(s);
        for (int64_t i = 0; i < out.numel(); ++i)
          if (passes_all || out.data[i] > T(0)) dx.data[i] += dout.data[i];
        return;
      }
      case StageKind::Add: {
        const bool relu_first = fault_on(Fault::ResidualAfterRelu);
        const Tensor<T>& x = taps.at(in);
        Tensor<T>& da = grads.at(in);
        for (int64_t i = 0; i < dout.numel(); ++i)
          if (!relu_first || x.data[i] > T(0)) da.data[i] += dout.data[i];
        add_into(grads.at(s.inputs[1]), dout);
        return;
      }
      case StageKind::AvgPool: {
        const Tensor<T>& x = taps.at(in);
        Tensor<T> dx(x.shape, Uninitialized{});
        global_avg_pool_backward(dx.ptr(), dout.ptr(), B, int(x.dim(1)), int(x.dim(2) * x.dim(3)));
        add_into(grads.at(in), dx);
        return;
      }
      case StageKind::Linear: {
        const Tensor<T>& x = taps.at(in);
        Tensor<T> dx(x.shape, Uninitialized{});
        linear_backward(dx.ptr(), param_grads.at("fc.weight").ptr(), param_grads.at("fc.bias").ptr(), dout.ptr(),
                        x.ptr(), weight("fc.weight").ptr(), B, int(x.dim(1)), kNumClasses);
        add_into(grads.at(in), dx);
        return;
      }
    }
  }

  static void add_into(Tensor<T>& total, const Tensor<T>& part) {
    for (int64_t i = 0; i < total.numel(); ++i) total.data[i] += part.data[i];
  }

  // torch.optim.SGD over every parameter (running statistics are buffers, not parameters)
  void update(std::map<std::string, Tensor<T>>& param_grads, const SgdConfig& sgd) {
    for (auto& [key, grad] : param_grads) {
      Tensor<T>& param = weight(key);
      const bool first = !momentum_.count(key);
      if (first) momentum_[key] = Tensor<T>(param.shape);
      sgd_update(param.ptr(), grad.ptr(), momentum_[key].ptr(), first, param.numel(), sgd);
    }
  }

  std::vector<Stage> stages_;
  Weights weights_;
  std::map<std::string, int64_t> batches_tracked_;
  std::map<std::string, bool> expected_;
  std::map<std::string, Tensor<T>> momentum_;
  std::map<std::string, BatchNormSaved> saved_;
  std::map<std::string, GuardedScratch<T>> packed_;
  std::map<std::string, ConvBackwardScratch<T>> backward_scratch_;
};

}  // namespace ssd::resnet8

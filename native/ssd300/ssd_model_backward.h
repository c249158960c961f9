// Model<T>::backward: d loss.total / d every tap and every parameter, in reverse execution order.
#pragma once

namespace ssd {

template <typename T>
Tensor<T>& Model<T>::grad(const std::string& tap) {
  auto it = grads_.find(tap);
  if (it == grads_.end()) it = grads_.emplace(tap, Tensor<T>(taps_.at(tap).shape)).first;
  return it->second;
}

// The gradient of a stage's output, complete once every consumer has run its backward. In isolated replay the
// value the consumers produced is kept as this stage's isolated result and replaced by the reference's, so the
// stage's own backward starts from the reference's gradient.
template <typename T>
Tensor<T>& Model<T>::take_output_grad(const std::string& tap) {
  Tensor<T>& g = grad(tap);
  if (replay_grads_ == nullptr) return g;
  isolated_grads_[tap] = std::move(g);  // moved, not copied: at SSD300 batch 4 these add up to half a GB
  isolated_grad_order_.push_back(tap);
  const Tensor<T>& given = replay_grads_->at(tap);
  const Tensor<T>& computed = isolated_grads_.at(tap);
  require_shape("grads['" + tap + "']", given.shape, computed.shape);
  g = given;
  return g;
}

// The values of a stage's output gradient for its backward. Unless every tap's gradient is kept (forward_backward
// returns them all), the tap's entry is dropped here, as autograd frees a gradient once it has been used: a training
// step then never holds more than a few activation gradients at once.
template <typename T>
Storage<T> Model<T>::consume_output_grad(const std::string& tap) {
  Tensor<T>& g = take_output_grad(tap);
  if (keep_tap_grads_) return g.data;
  Storage<T> values = std::move(g.data);
  grads_.erase(tap);
  return values;
}

// A forward output no later backward stage reads (its producer's backward has used it), dropped when the caller
// does not keep the trace: a training step frees activations as it goes, as autograd does.
template <typename T>
void Model<T>::release_tap(const std::string& tap) {
  if (!keep_taps_) taps_.erase(tap);
}

template <typename T>
void Model<T>::conv_backward(const std::string& out, const std::string& in, const std::string& prefix, int stride,
                             int pad, int dil, bool relu) {
  const Tensor<T>& x = taps_.at(in);
  const Tensor<T>& y = taps_.at(out);
  const ConvGeometry g = conv_geometry(prefix, shapes_.at(in), stride, pad, dil);
  const int B = int(x.dim(0));
  Storage<T> dpre = consume_output_grad(out);  // d loss / d conv output, before the ReLU
  if (relu) {
    auto routed = relu_pass_.find(out);
    if (routed == relu_pass_.end())
      relu_backward(dpre.data(), dpre.data(), y.ptr(), y.numel());
    else
      relu_backward_routed(dpre.data(), dpre.data(), routed->second.ptr(), y.numel());
  }
  release_tap(out);  // y is not read again
  T* dinp = in == "input" ? nullptr : grad(in).ptr();
  // The frozen-layer fault: the layer's gradients go to a scratch buffer that nobody reads.
  Tensor<T> unused_w, unused_b;
  const bool frozen = fault_on(Fault::FrozenLayer) && prefix == kFrozenLayer;
  if (frozen) unused_w = Tensor<T>(weight(prefix + ".weight").shape), unused_b = Tensor<T>(weight(prefix + ".bias").shape);
  Tensor<T>& dw = frozen ? unused_w : param_grads_.at(prefix + ".weight");
  Tensor<T>& db = frozen ? unused_b : param_grads_.at(prefix + ".bias");
  // The Bf16SavedActivations fault: the layer's input was saved for its backward in bfloat16.
  std::vector<T> saved;
  if (fault_on(Fault::Bf16SavedActivations) && prefix == kSubtleFaultLayer) {
    saved.assign(x.data.begin(), x.data.end());
    for (T& v : saved) v = T(round_to_bfloat16(float(v)));
  }
  conv2d_backward(dinp, dw.ptr(), db.ptr(), dpre.data(), saved.empty() ? x.ptr() : saved.data(), B,
                  weight(prefix + ".weight").ptr(), g, backward_scratch_);
}

// d loss / d head outputs -> grad/loc_head, grad/conf_head, then through the head convs into the six sources
template <typename T>
void Model<T>::head_backward() {
  const Tensor<T>& loc = taps_.at("loc_head");
  const Tensor<T>& conf = taps_.at("conf_head");
  const Tensor<T>& targets = taps_.at("targets.loc");
  const Tensor<int64_t>& matched = index_taps_.at("match.matched_idx");
  const Tensor<int64_t>& labels = index_taps_.at("match.labels");
  const Tensor<int64_t>& negatives = index_taps_.at("mining.negatives");
  const int K = num_classes_;
  const int64_t rows = loc.dim(0) * loc.dim(1);
  const T normalizer = loss_normalizer();
  Tensor<T>& dloc = grad("loc_head");
  // The output-buffer fault writes the class-loss gradient into a copy of the head output: the gradient buffer
  // stays zero while the outputs (already recorded) look right.
  Tensor<T> output_buffer;
  if (fault_on(Fault::GradIntoOutputBuffer)) output_buffer = conf;
  Tensor<T>& dconf = fault_on(Fault::GradIntoOutputBuffer) ? output_buffer : grad("conf_head");
  for (int64_t i = 0; i < rows; ++i) {
    if (matched.ptr()[i] >= 0)
      for (int j = 0; j < 4; ++j)
        dloc.ptr()[4 * i + j] = smooth_l1_grad(loc.ptr()[4 * i + j] - targets.ptr()[4 * i + j]) / normalizer;
    // A prior counted both as foreground and as mined negative (possible when 3 x #fg exceeds the background
    // count) enters the classification sum twice, and so its gradient.
    const int times_counted = (labels.ptr()[i] > 0 ? 1 : 0) + (negatives.ptr()[i] ? 1 : 0);
    if (times_counted)
      cross_entropy_backward(dconf.ptr() + i * K, conf.ptr() + i * K, K, labels.ptr()[i], T(times_counted) / normalizer);
  }

  const int B = int(loc.dim(0));
  const int64_t P = loc.dim(1);
  for (bool is_loc : {true, false}) {
    const int D = is_loc ? 4 : K;
    const Storage<T> djoined = consume_output_grad(is_loc ? "loc_head" : "conf_head");
    int64_t offset = 0;
    for (size_t k = 0; k < heads_.sources.size(); ++k) {
      const std::string name = std::string(is_loc ? "head.loc." : "head.conf.") + std::to_string(k);
      const MapShape src = shapes_.at(heads_.sources[k]);
      const int A = heads_.anchors[k];
      const int64_t conv_size = int64_t(A) * D * src.H * src.W;
      Tensor<T>& dconv = grad(name);
      const int64_t count = int64_t(src.H) * src.W * A;
      for (int n = 0; n < B; ++n)
        head_scatter_backward(dconv.ptr() + n * conv_size, djoined.data(), A, D, src.H, src.W,
                              head_first_row(n, B, P, offset, count));
      offset += count;
    }
  }
  for (size_t k = 0; k < heads_.sources.size(); ++k) head_pair_backward(int(k));
}

// Source k's loc and conf convs, backward: each one's bias gradient and input gradient (loc's added into the
// source's gradient first, then conf's: each source feeds one of each), then both weight gradients as one
// convolution's, as the forward runs them (run_head_pair): the two read the same map, so its columns are built and
// packed once for loc + conf rows. Each weight-gradient row is the same sum in the same order as in a conv of its
// own on the packed GEMM, added to what the gradient held; OpenBLAS (the weight gradients of AVX2 CPUs) may round a
// row differently within the taller matrix, inside the same error model.
template <typename T>
void Model<T>::head_pair_backward(int k) {
  const std::string& source = heads_.sources[k];
  const Tensor<T>& x = taps_.at(source);
  const int B = int(x.dim(0));
  const std::string taps[2] = {"head.loc." + std::to_string(k), "head.conf." + std::to_string(k)};
  const std::string params[2] = {head_param(true, k), head_param(false, k)};
  Storage<T> douts[2];
  ConvGeometry g[2];
  T* dinp = grad(source).ptr();
  for (int i = 0; i < 2; ++i) {
    g[i] = conv_geometry(params[i], shapes_.at(source), 1, 1, 1);
    douts[i] = consume_output_grad(taps[i]);
    release_tap(taps[i]);
    conv2d_backward(dinp, static_cast<T*>(nullptr), param_grads_.at(params[i] + ".bias").ptr(), douts[i].data(),
                    x.ptr(), B, weight(params[i] + ".weight").ptr(), g[i], backward_scratch_);
  }
  ConvGeometry both = g[0];
  both.OC = g[0].OC + g[1].OC;
  const int64_t pixels = int64_t(both.OH()) * both.OW(), K = both.patch();
  Tensor<T> dout({B, both.OC, both.OH(), both.OW()}, Uninitialized{});  // (B, loc + conf rows, OH, OW)
  Tensor<T> grad_weight({both.OC, K}, Uninitialized{});                  // (loc + conf rows, K)
  T* row = grad_weight.ptr();
  for (int i = 0; i < 2; ++i) {
    const int64_t image = g[i].OC * pixels;
    for (int n = 0; n < B; ++n)
      std::copy_n(douts[i].data() + n * image, image, dout.ptr() + n * both.OC * pixels + (i ? g[0].OC * pixels : 0));
    const T* held = param_grads_.at(params[i] + ".weight").ptr();
    row = std::copy_n(held, g[i].OC * K, row);
  }
  conv2d_backward(static_cast<T*>(nullptr), grad_weight.ptr(), static_cast<T*>(nullptr), dout.ptr(), x.ptr(), B,
                  static_cast<const T*>(nullptr), both, backward_scratch_);
  const T* sums = grad_weight.ptr();
  for (int i = 0; i < 2; ++i, sums += g[0].OC * K)
    std::copy_n(sums, g[i].OC * K, param_grads_.at(params[i] + ".weight").ptr());
}

template <typename T>
void Model<T>::backbone_backward() {
  for (auto op = backbone_.rbegin(); op != backbone_.rend(); ++op) {
    if (op->kind == OpKind::Conv) {
      conv_backward(op->out, op->in, op->param, op->stride, op->pad, op->dilation, op->relu);
      continue;
    }
    const MapShape in = shapes_.at(op->in), out = shapes_.at(op->out);
    const int B = int(taps_.at(op->in).dim(0));
    const int64_t in_size = int64_t(in.C) * in.H * in.W, out_size = int64_t(out.C) * out.H * out.W;
    const Storage<T> dout = consume_output_grad(op->out);
    Tensor<T>& dinp = grad(op->in);
    if (op->kind == OpKind::MaxPool) {
      const PoolGeometry g{in.C, in.H, in.W, op->kernel, op->stride, op->pad, op->ceil_mode};
      const std::vector<int32_t>& argmax = pool_argmax_.at(op->out);
      for (int n = 0; n < B; ++n)
        maxpool_backward(dinp.ptr() + n * in_size, dout.data() + n * out_size, argmax.data() + n * out_size, g);
    } else {
      const int HW = in.H * in.W;
      const Tensor<T>& x = taps_.at(op->in);
      const Tensor<T>& norm = l2norm_norm_.at(op->out);
      for (int n = 0; n < B; ++n)
        l2norm_backward(dinp.ptr() + n * in_size, param_grads_.at(op->param).ptr(), dout.data() + n * out_size,
                        x.ptr() + n * in_size, weight(op->param).ptr(), norm.ptr() + n * HW, in.C, HW);
    }
    release_tap(op->out);
  }
}

template <typename T>
void Model<T>::backward(bool keep_tap_grads, bool keep_taps) {
  keep_tap_grads_ = keep_tap_grads;
  keep_taps_ = keep_taps;
  grads_.clear();
  // Zeroed once per step; the not-zeroed fault keeps the previous step's sums (from the second step on).
  if (!fault_on(Fault::GradsNotZeroed) || param_grads_.size() != weights_.size()) {
    param_grads_.clear();
    for (const auto& [key, w] : weights_) param_grads_[key] = Tensor<T>(w.shape);
  }
  head_backward();
  backbone_backward();
}

}  // namespace ssd

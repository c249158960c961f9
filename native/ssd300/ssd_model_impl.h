// Model<T> member definitions: weight validation, shape inference, forward.
#pragma once
#include <set>

namespace ssd {

inline std::string head_param(bool loc, int k) {
  return std::string(loc ? "head.regression_head" : "head.classification_head") + ".module_list." +
         std::to_string(k);
}

template <typename T>
std::vector<std::string> Model<T>::weight_names() const {
  std::vector<std::string> names;
  for (const Op& op : backbone_) {
    if (op.kind == OpKind::Conv) names.insert(names.end(), {op.param + ".weight", op.param + ".bias"});
    if (op.kind == OpKind::L2Norm) names.push_back(op.param);
  }
  for (bool loc : {true, false})
    for (size_t k = 0; k < heads_.sources.size(); ++k)
      names.insert(names.end(), {head_param(loc, int(k)) + ".weight", head_param(loc, int(k)) + ".bias"});
  return names;
}

template <typename T>
void Model<T>::check_conv_weight(const std::string& prefix, int in_channels, int kernel, int expect_out) const {
  const auto& w = weight(prefix + ".weight").shape;
  const auto& b = weight(prefix + ".bias").shape;
  const bool ok = w.size() == 4 && w[0] > 0 && w[1] == in_channels && w[2] == kernel && w[3] == kernel &&
                  (expect_out < 0 || w[0] == expect_out);
  if (!ok)
    throw std::invalid_argument("weight '" + prefix + ".weight' has shape " + shape_str(w) + ", expected (" +
                                (expect_out < 0 ? std::string("out_channels") : std::to_string(expect_out)) + ", " +
                                std::to_string(in_channels) + ", " + std::to_string(kernel) + ", " +
                                std::to_string(kernel) + ")");
  if (b != std::vector<int64_t>{w[0]})
    throw std::invalid_argument("weight '" + prefix + ".bias' has shape " + shape_str(b) + ", expected (" +
                                std::to_string(w[0]) + ",)");
}

template <typename T>
Model<T>::Model(Weights weights, int image_size) : weights_(std::move(weights)), image_size_(image_size) {
  const std::vector<std::string> expected = weight_names();
  for (const auto& name : expected)
    if (!weights_.count(name)) throw std::invalid_argument("missing weight '" + name + "'");
  const std::set<std::string> known(expected.begin(), expected.end());
  for (const auto& [name, value] : weights_)
    if (!known.count(name)) throw std::invalid_argument("unexpected weight '" + name + "'");

  shapes_["input"] = {3, image_size, image_size};
  for (const Op& op : backbone_) {
    const MapShape in = shapes_.at(op.in);
    if (op.kind == OpKind::Conv) {
      check_conv_weight(op.param, in.C, op.kernel);
      const ConvGeometry g = conv_geometry(op.param, in, op.stride, op.pad, op.dilation);
      shapes_[op.out] = {g.OC, g.OH(), g.OW()};
    } else if (op.kind == OpKind::MaxPool) {
      const PoolGeometry g{in.C, in.H, in.W, op.kernel, op.stride, op.pad, op.ceil_mode};
      shapes_[op.out] = {in.C, g.OH(), g.OW()};
    } else {
      const auto& s = weight(op.param).shape;
      if (s != std::vector<int64_t>{in.C})
        throw std::invalid_argument("weight '" + op.param + "' has shape " + shape_str(s) + ", expected (" +
                                    std::to_string(in.C) + ",)");
      shapes_[op.out] = in;
    }
  }
  for (size_t k = 0; k < heads_.sources.size(); ++k) {
    const MapShape src = shapes_.at(heads_.sources[k]);
    if (src.H != priors_.feature_sizes[k] || src.W != priors_.feature_sizes[k])
      throw std::invalid_argument("source map '" + heads_.sources[k] + "' is " + std::to_string(src.H) + "x" +
                                  std::to_string(src.W) + ", the priors expect " +
                                  std::to_string(priors_.feature_sizes[k]));
    const int A = heads_.anchors[k];
    check_conv_weight(head_param(true, int(k)), src.C, 3, 4 * A);
    const int64_t conf_out = weight(head_param(false, int(k)) + ".weight").shape.at(0);
    if (conf_out % A != 0 || (k > 0 && conf_out / A != num_classes_))
      throw std::invalid_argument("weight '" + head_param(false, int(k)) + ".weight' has " +
                                  std::to_string(conf_out) + " output channels, expected anchors (" +
                                  std::to_string(A) + ") x num_classes" +
                                  (k > 0 ? " (" + std::to_string(num_classes_) + ")" : std::string()));
    if (k == 0) num_classes_ = int(conf_out / A);
    check_conv_weight(head_param(false, int(k)), src.C, 3, int(conf_out));
  }
}

template <typename T>
ConvGeometry Model<T>::conv_geometry(const std::string& prefix, const MapShape& in, int stride, int pad,
                                     int dil) const {
  const auto& w = weight(prefix + ".weight").shape;
  return ConvGeometry{in.C, in.H, in.W, int(w[0]), int(w[2]), int(w[3]), stride, pad, dil};
}

template <typename T>
void Model<T>::record(const std::string& name, Tensor<T> value) {
  taps_[name] = std::move(value);
  tap_order_.push_back(name);
}

template <typename T>
void Model<T>::record_index(const std::string& name, Tensor<int64_t> value) {
  index_taps_[name] = std::move(value);
  tap_order_.push_back(name);
}

// The ladder's convolution faults (faults.h) on copies of one layer's weight (OC,C,KH,KW) and bias (OC); false when
// none is on.
template <typename T>
bool subtle_conv_faults(const Tensor<T>& weight, const Tensor<T>& bias, std::vector<T>& w, std::vector<T>& b) {
  const bool drop = fault_on(Fault::ConvLastTermDropped), bf16 = fault_on(Fault::Bf16Weights);
  const bool off = fault_on(Fault::BiasChannelOff), twice = fault_on(Fault::BiasAddedTwice);
  if (!(drop || bf16 || off || twice)) return false;
  w.assign(weight.data.begin(), weight.data.end());
  b.assign(bias.data.begin(), bias.data.end());
  const int64_t per_output = weight.numel() / weight.dim(0);
  if (drop)  // each output's sum stops one term short: the last input channel's last tap is left out
    for (int64_t o = 0; o < weight.dim(0); ++o) w[o * per_output + per_output - 1] = T(0);
  if (bf16)
    for (T& v : w) v = T(round_to_bfloat16(float(v)));
  if (off) b[0] *= T(1 + 1e-3);
  if (twice)
    for (T& v : b) v += v;
  return true;
}

template <typename T>
void Model<T>::run_conv(const std::string& out, const std::string& in, const std::string& prefix, int stride,
                        int pad, int dil, bool relu) {
  const Tensor<T>& x = taps_.at(in);
  const int B = int(x.dim(0));
  const ConvGeometry g = conv_geometry(prefix, shapes_.at(in), stride, pad, dil);
  Tensor<T> y({B, g.OC, g.OH(), g.OW()}, Uninitialized{});  // conv2d_forward writes every element
  GuardedScratch<T>* packed = &packed_weight_;
  bool kept = false;
  if (inference_ && !packs_own_weights(g)) {
    auto [entry, added] = inference_packed_.try_emplace(prefix);
    packed = &entry->second, kept = !added;
  }
  const T* w = weight(prefix + ".weight").ptr();
  const T* bias = weight(prefix + ".bias").ptr();
  std::vector<T> broken_w, broken_bias;
  if (prefix == kSubtleFaultLayer && subtle_conv_faults(weight(prefix + ".weight"), weight(prefix + ".bias"), broken_w,
                                                        broken_bias)) {
    w = broken_w.data(), bias = broken_bias.data(), packed = &packed_weight_, kept = false;
  }
  const T* input = x.ptr();
  std::vector<T> cropped;
  if (prefix == kSubtleFaultLayer && fault_on(Fault::RightPaddingOffByOne)) {
    // The right border's padding taken to start one column early: the last input column of every plane reads 0.
    cropped.assign(x.data.begin(), x.data.end());
    const int64_t width = x.dim(3);
    for (int64_t row = 0; row < x.numel() / width; ++row) cropped[size_t(row * width + width - 1)] = T(0);
    input = cropped.data();
  }
  conv2d_forward(y.ptr(), input, B, w, g, *packed, ConvEpilogue<T>{bias, relu}, kept);
  record(out, std::move(y));
}


template <typename T>
void Model<T>::run_op(const Op& op) {
  if (op.kind == OpKind::Conv) {
    run_conv(op.out, op.in, op.param, op.stride, op.pad, op.dilation, op.relu);
    return;
  }
  const int B = int(taps_.at(op.in).dim(0));
  const MapShape out = shapes_.at(op.out);
  Tensor<T> y({B, out.C, out.H, out.W}, Uninitialized{});  // max-pool and L2Norm write every element
  if (op.kind == OpKind::MaxPool)
    pool_stage(op, y);
  else
    l2norm_stage(op, y);
  record(op.out, std::move(y));
}

// x = taps_[op.in] (B,C,H,W) -> y (B,C,OH,OW), and each window's choice (pool_argmax_) kept for backward
template <typename T>
void Model<T>::pool_stage(const Op& op, Tensor<T>& y) {
  const Tensor<T>& x = taps_.at(op.in);
  const int B = int(x.dim(0));
  const MapShape in = shapes_.at(op.in), out = shapes_.at(op.out);
  const int64_t in_size = int64_t(in.C) * in.H * in.W, out_size = int64_t(out.C) * out.H * out.W;
  std::vector<int32_t>& argmax = pool_argmax_[op.out];
  argmax.resize(size_t(B) * out_size);
  const PoolGeometry g{in.C, in.H, in.W, op.kernel, op.stride, op.pad, op.ceil_mode};
  for (int n = 0; n < B; ++n)
    maxpool_forward(y.ptr() + n * out_size, argmax.data() + n * out_size, x.ptr() + n * in_size, g);
}

// x = taps_[op.in] (B,C,H,W) -> y (B,C,H,W), and the per-pixel norms (B,H*W) kept for backward
template <typename T>
void Model<T>::l2norm_stage(const Op& op, Tensor<T>& y) {
  const Tensor<T>& x = taps_.at(op.in);
  const MapShape in = shapes_.at(op.in);
  const int B = int(x.dim(0)), HW = in.H * in.W;
  const int64_t size = int64_t(in.C) * HW;
  Tensor<T>& norm = l2norm_norm_[op.out];
  norm = Tensor<T>({B, HW});
  for (int n = 0; n < B; ++n)
    l2norm_forward(y.ptr() + n * size, norm.ptr() + n * HW, x.ptr() + n * size, weight(op.param).ptr(), in.C, HW);
}

// Source k's loc and conf convs as one convolution -> (head.loc.k, head.conf.k): both read the same map, so its
// columns are packed once for loc + conf rows (the loc conv alone, 16-24 output channels, packed a 512-1024
// channel map's columns for 3-4 row panels: 1.6-1.9x PyTorch's time at batch 1). Every output element is the same
// sum in the same order as in a conv of its own (gemm_packed.h). The isolated replay runs the same function.
template <typename T>
std::pair<Tensor<T>, Tensor<T>> Model<T>::run_head_pair(int k) {
  const Tensor<T>& x = taps_.at(heads_.sources[k]);
  const int B = int(x.dim(0));
  const std::string loc = head_param(true, k), conf = head_param(false, k);
  const Tensor<T>&loc_weight = weight(loc + ".weight"), &conf_weight = weight(conf + ".weight");
  const int loc_rows = int(loc_weight.dim(0)), conf_rows = int(conf_weight.dim(0));
  ConvGeometry g = conv_geometry(loc, shapes_.at(heads_.sources[k]), 1, 1, 1);
  g.OC = loc_rows + conf_rows;
  const int64_t K = g.patch(), pixels = int64_t(g.OH()) * g.OW();
  const Storage<T>& loc_bias = weight(loc + ".bias").data;
  const Storage<T>& conf_bias = weight(conf + ".bias").data;
  std::vector<T> bias(loc_bias.begin(), loc_bias.end());
  bias.insert(bias.end(), conf_bias.begin(), conf_bias.end());
  GuardedScratch<T>* packed = &packed_weight_;
  bool kept = false;
  if (inference_ && !packs_own_weights(g)) {
    auto [entry, added] = inference_packed_.try_emplace("head.pair." + std::to_string(k));
    packed = &entry->second, kept = !added;
  }
  std::vector<T> stacked;  // (loc_rows + conf_rows, K): only to pack from
  if (!kept) {
    stacked.reserve(size_t(g.OC) * K);
    stacked.insert(stacked.end(), loc_weight.data.begin(), loc_weight.data.end());
    stacked.insert(stacked.end(), conf_weight.data.begin(), conf_weight.data.end());
  }
  Tensor<T> both({B, g.OC, g.OH(), g.OW()}, Uninitialized{});
  conv2d_forward(both.ptr(), x.ptr(), B, stacked.data(), g, *packed, ConvEpilogue<T>{bias.data()}, kept);
  Tensor<T> loc_out({B, loc_rows, g.OH(), g.OW()}, Uninitialized{});
  Tensor<T> conf_out({B, conf_rows, g.OH(), g.OW()}, Uninitialized{});
  for (int n = 0; n < B; ++n) {
    const T* image = both.ptr() + n * g.OC * pixels;
    std::copy(image, image + loc_rows * pixels, loc_out.ptr() + n * loc_rows * pixels);
    std::copy(image + loc_rows * pixels, image + g.OC * pixels, conf_out.ptr() + n * conf_rows * pixels);
  }
  return {std::move(loc_out), std::move(conf_out)};
}

template <typename T>
void Model<T>::join_head(bool loc) {
  const int D = loc ? 4 : num_classes_;
  const std::string family = loc ? "loc" : "conf";
  const int64_t P = priors_.count();
  const int B = int(taps_.at("head." + family + ".0").dim(0));
  Tensor<T> joined({B, P, D}, Uninitialized{});  // the sources' rows cover all P rows of every image
  int64_t offset = 0;
  for (size_t k = 0; k < heads_.sources.size(); ++k) {
    const MapShape src = shapes_.at(heads_.sources[k]);
    const int A = heads_.anchors[k];
    const int64_t conv_size = int64_t(A) * D * src.H * src.W;
    const Tensor<T>& conv = taps_.at("head." + family + "." + std::to_string(k));
    const int64_t count = int64_t(src.H) * src.W * A;
    for (int n = 0; n < B; ++n)
      head_scatter_forward(joined.ptr(), conv.ptr() + n * conv_size, A, D, src.H, src.W,
                           head_first_row(n, B, P, offset, count));
    offset += count;
  }
  record(family + "_head", std::move(joined));
}

template <typename T>
void Model<T>::reset() {
  taps_.clear();
  pool_argmax_.clear();
  l2norm_norm_.clear();
  index_taps_.clear();
  grads_.clear();
  tap_order_.clear();
  relu_pass_.clear();
  isolated_grads_.clear();
  isolated_grad_order_.clear();
}

template <typename T>
void Model<T>::forward(const Tensor<T>& images, bool inference) {
  reset();
  inference_ = inference;
  struct EndInference {
    bool& flag;
    ~EndInference() { flag = false; }
  } end_inference{inference_};
  taps_["input"] = images;
  for (const Op& op : backbone_) run_op(op);
  // Heads: torchvision runs the regression head over all sources, then the classification head; the taps are
  // recorded in that order, each source's two convs computed together (run_head_pair).
  std::vector<std::pair<Tensor<T>, Tensor<T>>> heads;
  for (size_t k = 0; k < heads_.sources.size(); ++k) heads.push_back(run_head_pair(int(k)));
  for (bool loc : {true, false}) {
    for (size_t k = 0; k < heads_.sources.size(); ++k)
      record(std::string(loc ? "head.loc." : "head.conf.") + std::to_string(k),
             std::move(loc ? heads[k].first : heads[k].second));
    join_head(loc);
  }
  make_priors();
}

template <typename T>
void Model<T>::make_priors() {
  Tensor<T> boxes({priors_.count(), 4});
  default_boxes(boxes.ptr(), priors_);
  record("priors", std::move(boxes));
}

}  // namespace ssd

// Model<T>::isolated and isolated_backward: one stage at a time, fed the reference's own inputs, so a stage's own
// error is told apart from the error it inherited from upstream.
#pragma once
#include <algorithm>

namespace ssd {

// A max-pool window's choice (`what`, as the error names it): a flat index that must lie inside its input plane.
inline void require_in_plane(const std::string& what, int64_t index, const MapShape& plane) {
  if (index < 0 || index >= int64_t(plane.H) * plane.W)
    throw std::invalid_argument(what + " holds " + std::to_string(index) + ", outside the " +
                                std::to_string(plane.H) + "x" + std::to_string(plane.W) + " plane");
}

// The shape a given tap must have in a batch of `batch` images (priors have no batch dimension).
template <typename T>
std::vector<int64_t> Model<T>::expected_shape(const std::string& tap, int64_t batch) const {
  const int64_t P = priors_.count();
  auto map = shapes_.find(tap);
  if (map != shapes_.end()) return {batch, map->second.C, map->second.H, map->second.W};
  if (tap.rfind("head.", 0) == 0) {  // head.loc.k / head.conf.k: (B, A*D, H, W) of source k
    const bool loc = tap.rfind("head.loc.", 0) == 0;
    const int k = std::stoi(tap.substr(tap.rfind('.') + 1));
    const MapShape src = shapes_.at(heads_.sources.at(k));
    return {batch, int64_t(heads_.anchors[k]) * (loc ? 4 : num_classes_), src.H, src.W};
  }
  if (tap == "priors") return {P, 4};
  if (tap == "loc_head" || tap == "targets.loc") return {batch, P, 4};
  if (tap == "conf_head") return {batch, P, num_classes_};
  if (tap == "loss.cls_per_prior" || tap.rfind("match.", 0) == 0 || tap.rfind("mining.", 0) == 0) return {batch, P};
  if (tap.rfind("loss.", 0) == 0) return {};
  throw std::invalid_argument("unknown tap '" + tap + "'");
}

// A given input must be present with the shape of its tap, and index taps must hold values the kernels can use.
template <typename T>
void Model<T>::check_given(const std::string& stage, const std::string& tap, int64_t batch) const {
  const bool is_index = tap.rfind("match.", 0) == 0 || tap.rfind("mining.", 0) == 0;
  if (is_index ? !index_taps_.count(tap) : !taps_.count(tap))
    throw std::invalid_argument("isolated stage '" + stage + "' needs input '" + tap + "'");
  const auto& shape = is_index ? index_taps_.at(tap).shape : taps_.at(tap).shape;
  require_shape("input '" + tap + "'", shape, expected_shape(tap, batch));
  if (tap == "match.labels")
    for (int64_t label : index_taps_.at(tap).data)
      if (label < 0 || label >= num_classes_)
        throw std::invalid_argument("input 'match.labels' holds label " + std::to_string(label) +
                                    ", expected 0 <= label < " + std::to_string(num_classes_));
}

template <typename T>
void Model<T>::isolated(const std::string& name, std::map<std::string, Tensor<T>> inputs,
                        std::map<std::string, Tensor<int64_t>> index_inputs, const std::vector<Tensor<T>>& boxes,
                        const std::vector<std::vector<int64_t>>& labels) {
  reset();
  taps_ = std::move(inputs);
  index_taps_ = std::move(index_inputs);
  // The batch size is the given inputs' first dimension; check_given holds every input to it.
  int64_t batch = int64_t(boxes.size());
  for (const auto& [tap, value] : taps_)
    if (tap != "priors" && !value.shape.empty()) batch = value.shape[0];
  auto need = [&](std::initializer_list<std::string> taps) {
    for (const auto& tap : taps) check_given(name, tap, batch);
  };
  for (const Op& op : backbone_)
    if (op.out == name) {
      need({op.in});
      run_op(op);
      return;
    }
  for (bool loc : {true, false}) {
    const std::string family = loc ? "loc" : "conf";
    for (size_t k = 0; k < heads_.sources.size(); ++k)
      if (name == "head." + family + "." + std::to_string(k)) {
        need({heads_.sources[k]});
        // The forward's own path: the source's loc and conf convs as one (run_head_pair), the other output dropped.
        auto outputs = run_head_pair(int(k));
        record(name, std::move(loc ? outputs.first : outputs.second));
        return;
      }
    if (name == family + "_head") {
      for (size_t k = 0; k < heads_.sources.size(); ++k) need({"head." + family + "." + std::to_string(k)});
      join_head(loc);
      return;
    }
  }
  if (name == "priors") {
    make_priors();  // a stage without inputs: isolated and propagated are the same computation
  } else if (name == "match.matched_idx" || name == "match.labels" || name == "targets.loc") {
    need({"priors"});
    if (int64_t(boxes.size()) != batch)
      throw std::invalid_argument("isolated matching got ground truth for " + std::to_string(boxes.size()) +
                                  " images, expected " + std::to_string(batch));
    match_stage(boxes, labels);
  } else if (name == "loss.cls_per_prior") {
    need({"conf_head", "match.labels"});
    class_loss_stage();
  } else if (name == "mining.negatives") {
    need({"loss.cls_per_prior", "match.labels"});
    mining_stage();
  } else if (name == "loss.loc" || name == "loss.conf" || name == "loss.total") {
    need({"loc_head", "targets.loc", "loss.cls_per_prior", "match.matched_idx", "match.labels", "mining.negatives"});
    loss_sums_stage();
  } else {
    throw std::invalid_argument("no isolated stage produces '" + name + "'");
  }
}

template <typename T>
void Model<T>::isolated_backward(std::map<std::string, Tensor<T>> taps,
                                 std::map<std::string, Tensor<int64_t>> index_taps,
                                 const std::map<std::string, Tensor<T>>& grads,
                                 const std::map<std::string, Tensor<int64_t>>& pool_argmax,
                                 std::map<std::string, Tensor<uint8_t>> relu_pass) {
  reset();
  taps_ = std::move(taps);
  index_taps_ = std::move(index_taps);
  const std::string stage = "backward";
  if (!taps_.count("loc_head")) throw std::invalid_argument("isolated stage 'backward' needs input 'loc_head'");
  const int64_t batch = taps_.at("loc_head").shape.empty() ? 0 : taps_.at("loc_head").shape[0];
  for (const auto& [tap, shape] : shapes_) check_given(stage, tap, batch);
  for (bool loc : {true, false})
    for (size_t k = 0; k < heads_.sources.size(); ++k)
      check_given(stage, std::string(loc ? "head.loc." : "head.conf.") + std::to_string(k), batch);
  for (const char* tap : {"loc_head", "conf_head", "targets.loc", "match.matched_idx", "match.labels",
                          "mining.negatives"})
    check_given(stage, tap, batch);

  for (const Op& op : backbone_) {
    if (op.kind == OpKind::MaxPool) {
      // The window decisions are forward state: the native side's own on the given input (the forward's own
      // max-pool, so a wrong argmax shows in isolation too), except at windows a given argmax decides (a near-tie
      // the reference decided; -1 elsewhere), each validated so no index leaves its plane.
      auto given = pool_argmax.find(op.out);
      Tensor<T> unused(taps_.at(op.out).shape);  // the given output tap stays
      pool_stage(op, unused);
      if (given == pool_argmax.end()) continue;
      const MapShape in = shapes_.at(op.in);
      const std::string what = "pool_argmax['" + op.out + "']";
      require_shape(what, given->second.shape, expected_shape(op.out, batch));
      std::vector<int32_t>& argmax = pool_argmax_.at(op.out);
      for (size_t i = 0; i < argmax.size(); ++i) {
        if (given->second.data[i] == -1) continue;
        require_in_plane(what, given->second.data[i], in);
        argmax[i] = int32_t(given->second.data[i]);
      }
    } else if (op.kind == OpKind::L2Norm) {
      Tensor<T> unused(taps_.at(op.out).shape);  // only the norms are needed: the output tap stays the given one
      l2norm_stage(op, unused);
    }
  }
  for (const auto& [tap, mask] : relu_pass) {
    if (!is_relu_output(tap)) throw std::invalid_argument("relu_pass names '" + tap + "', which is not a ReLU's output");
    require_shape("relu_pass['" + tap + "']", mask.shape, taps_.at(tap).shape);
  }
  relu_pass_ = std::move(relu_pass);
  // Every stage's output gradient: backbone ops, head convs and the two joined heads.
  std::vector<std::string> outputs = {"loc_head", "conf_head"};
  for (const Op& op : backbone_) outputs.push_back(op.out);
  for (bool loc : {true, false})
    for (size_t k = 0; k < heads_.sources.size(); ++k)
      outputs.push_back(std::string(loc ? "head.loc." : "head.conf.") + std::to_string(k));
  for (const auto& tap : outputs)
    if (!grads.count(tap)) throw std::invalid_argument("isolated backward needs grads['" + tap + "']");

  replay_grads_ = &grads;
  try {
    backward(/*keep_tap_grads=*/false);  // the results are isolated_grads_; the reference's copies go once used
  } catch (...) {
    replay_grads_ = nullptr;
    throw;
  }
  replay_grads_ = nullptr;
}

}  // namespace ssd

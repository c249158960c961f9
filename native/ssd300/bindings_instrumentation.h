// The harness's instrumentation of the native SSD300, apart from its model API: one training step traced whole
// (with another run's near-tie decisions taken where given), each forward, loss and backward stage run alone from
// given inputs. What docs/porting.md calls the instrumentation contract.
#pragma once
#include <map>
#include <string>

#include "bindings_common.h"

namespace ssd::bindings {

// {tap: (kind, first, second)} -> StepRouting: ("pool", choice int64, mask uint8), ("relu", force_pass uint8,
// force_block uint8), ("mining", negatives uint8, mask uint8) under "mining.negatives"; None is no routing
inline StepRouting routing_from_python(const py::handle& routing_obj) {
  StepRouting routing;
  if (routing_obj.is_none()) return routing;
  if (!py::isinstance<py::dict>(routing_obj))
    throw py::type_error("argument 'routing' must be a dict {tap: (kind, array, array)} or None, got " +
                         std::string(py::str(py::type::of(routing_obj).attr("__name__"))));
  for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(routing_obj)) {
    if (!py::isinstance<py::str>(key))
      throw py::type_error("routing keys must be str, got " + std::string(py::repr(key)));
    const std::string tap = py::str(key), where = "routing['" + tap + "']";
    if (!py::isinstance<py::tuple>(value) || py::len(value) != 3 || !py::isinstance<py::str>(value[py::int_(0)]))
      throw py::type_error(where + " must be a tuple (kind, array, array), got " + std::string(py::repr(value)));
    const py::tuple entry = py::reinterpret_borrow<py::tuple>(value);
    const std::string kind = py::str(entry[0]);
    if (kind == "pool") {
      routing.pools[tap] = {tensor_from_array<int64_t>(entry[1], where + " choice"),
                            tensor_from_array<uint8_t>(entry[2], where + " mask")};
    } else if (kind == "relu") {
      routing.relus[tap] = {tensor_from_array<uint8_t>(entry[1], where + " force_pass"),
                            tensor_from_array<uint8_t>(entry[2], where + " force_block")};
    } else if (kind == "mining" && tap == "mining.negatives") {
      routing.mining = StepRouting::Mining{tensor_from_array<uint8_t>(entry[1], where + " negatives"),
                                           tensor_from_array<uint8_t>(entry[2], where + " mask")};
    } else {
      throw std::invalid_argument(where + " has kind '" + kind +
                                  "': a native step follows 'pool' and 'relu' decisions at their taps and 'mining' "
                                  "at 'mining.negatives'");
    }
  }
  return routing;
}

// -> {tap: array} for the whole training step: forward taps, loss taps, then "grad/<tap>" in reverse execution
// order and "param_grad/<key>" in state_dict order. routing: another run's near-tie decisions to take
// (step_routing.h), checked before the step runs.
template <typename T>
py::dict forward_backward(Model<T>& model, const py::handle& images_obj, const py::handle& boxes_obj,
                          const py::handle& labels_obj, const py::handle& routing_obj) {
  const Batch<T> batch = batch_from_python(model, images_obj, boxes_obj, labels_obj);
  const StepRouting routing = routing_from_python(routing_obj);
  model.check_routing(routing, batch.images.dim(0));
  {
    py::gil_scoped_release release;
    model.forward(batch.images);
    model.loss(batch.boxes, batch.labels, routing.mining ? &*routing.mining : nullptr);
    model.route_backward(routing);
    model.backward();
  }
  py::dict trace;
  for (const auto& name : model.tap_order()) put_tap(trace, model, name);
  const auto& order = model.tap_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it)
    if (model.has_grad(*it)) trace[py::str("grad/" + *it)] = array_taking(model.take_grad(*it));
  for (const auto& key : model.weight_names())
    trace[py::str("param_grad/" + key)] = array_from_tensor(model.param_grad(key));  // a copy: sgd_step reads them
  model.drop_trace();
  return trace;
}

inline bool is_index_name(const std::string& tap) { return tap.rfind("match.", 0) == 0 || tap.rfind("mining.", 0) == 0; }

inline std::string tap_key(const py::handle& key, const std::string& arg) {
  if (!py::isinstance<py::str>(key)) throw py::type_error(arg + " keys must be str, got " + std::string(py::repr(key)));
  return py::str(key);
}

// {tap: array} -> float taps (dtype T) and index taps (match.*, mining.*: int64)
template <typename T>
void split_taps(const py::dict& given, const std::string& arg, std::map<std::string, Tensor<T>>& taps,
                std::map<std::string, Tensor<int64_t>>& index_taps) {
  for (const auto& [key, value] : given) {
    const std::string tap = tap_key(key, arg);
    const std::string where = arg + "['" + tap + "']";
    if (is_index_name(tap))
      index_taps[tap] = tensor_from_array<int64_t>(value, where);
    else
      taps[tap] = tensor_from_array<T>(value, where);
  }
}

template <typename V>
std::map<std::string, Tensor<V>> tensors_from_dict(const py::dict& given, const std::string& arg) {
  std::map<std::string, Tensor<V>> out;
  for (const auto& [key, value] : given) {
    const std::string tap = tap_key(key, arg);
    out[tap] = tensor_from_array<V>(value, arg + "['" + tap + "']");
  }
  return out;
}

// name, {tap: array} -> {tap: array}: the outputs of the one stage producing `name`, computed from the given
// inputs (index taps as int64); matching also takes the ground truth
template <typename T>
py::dict isolated(Model<T>& model, const std::string& name, const py::dict& inputs, const py::handle& boxes_obj,
                  const py::handle& labels_obj) {
  std::map<std::string, Tensor<T>> taps;
  std::map<std::string, Tensor<int64_t>> index_taps;
  split_taps(inputs, "inputs", taps, index_taps);
  std::vector<Tensor<T>> boxes;
  std::vector<std::vector<int64_t>> labels;
  if (!boxes_obj.is_none() || !labels_obj.is_none()) {
    const py::sequence box_list = py::reinterpret_borrow<py::sequence>(boxes_obj);
    targets_from_lists(boxes, labels, boxes_obj, labels_obj, int64_t(py::len(box_list)), model.num_classes());
  }
  {
    py::gil_scoped_release release;
    model.isolated(name, std::move(taps), std::move(index_taps), boxes, labels);
  }
  py::dict out;
  for (const auto& tap : model.tap_order()) put_tap(out, model, tap);
  model.drop_trace();
  return out;
}

// {tap: array}, {tap: grad}, {pool tap: argmax}, {relu tap: uint8 mask} -> {"grad/<tap>": ..., "param_grad/<key>": ...}
// from every backward stage fed the given forward state and the given gradient of its output
template <typename T>
py::dict isolated_backward(Model<T>& model, const py::dict& taps_obj, const py::dict& grads_obj,
                           const py::dict& pool_argmax_obj, const py::dict& relu_pass_obj) {
  std::map<std::string, Tensor<T>> taps;
  std::map<std::string, Tensor<int64_t>> index_taps;
  split_taps(taps_obj, "taps", taps, index_taps);
  const auto grads = tensors_from_dict<T>(grads_obj, "grads");
  const auto pool_argmax = tensors_from_dict<int64_t>(pool_argmax_obj, "pool_argmax");
  auto relu_pass = tensors_from_dict<uint8_t>(relu_pass_obj, "relu_pass");
  {
    py::gil_scoped_release release;
    model.isolated_backward(std::move(taps), std::move(index_taps), grads, pool_argmax, std::move(relu_pass));
  }
  py::dict out;
  for (const auto& tap : model.isolated_grad_order())
    out[py::str("grad/" + tap)] = array_taking(model.take_isolated_grad(tap));
  for (const auto& key : model.weight_names())
    out[py::str("param_grad/" + key)] = array_from_tensor(model.param_grad(key));
  model.drop_trace();
  return out;
}

// The harness's instrumentation of a model: the whole step traced, each stage run alone (docs/porting.md).
template <typename T>
void bind_instrumentation(py::class_<Model<T>>& model) {
  model
      .def("forward_backward", &forward_backward<T>, py::arg("images"), py::arg("boxes"), py::arg("labels"),
           py::arg("routing") = py::none(),
           "One training step without the update: forward, loss and backward taps, in one dict; with `routing`, "
           "another run's near-tie decisions taken where masked.")
      .def("isolated", &isolated<T>, py::arg("name"), py::arg("inputs"), py::arg("boxes") = py::none(),
           py::arg("labels") = py::none(),
           "Run only the stage producing tap `name` from the given input taps (e.g. the reference's); -> its outputs.")
      .def("isolated_backward", &isolated_backward<T>, py::arg("taps"), py::arg("grads"), py::arg("pool_argmax"),
           py::arg("relu_pass"),
           "Every backward stage fed the given forward state and the given gradient of its output.");
}

}  // namespace ssd::bindings

// Python bindings: the only file that knows pybind11 beyond the boundary checks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "array_checks.h"
#include "kernel_environment.h"
#include "ssd_model.h"

namespace py = pybind11;
using namespace ssd;

namespace {

template <typename T>
Model<T> make_model(const py::dict& state_dict) {
  typename Model<T>::Weights weights;
  for (const auto& [key, value] : state_dict) {
    if (!py::isinstance<py::str>(key)) throw py::type_error("state_dict keys must be str, got " + std::string(py::repr(key)));
    const std::string name = py::str(key);
    weights[name] = tensor_from_array<T>(value, "state_dict['" + name + "']");
  }
  return Model<T>(std::move(weights));
}

// -> {tap name: array} in execution order; only the head outputs when all_taps is false (what a deployed model
// returns: no copies of the intermediate maps)
template <typename T>
py::dict forward(Model<T>& model, const py::handle& images_obj, bool all_taps) {
  Tensor<T> images = tensor_from_array<T>(images_obj, "images");
  check_images(images, model.image_size());
  {
    py::gil_scoped_release release;
    model.forward(images, /*inference=*/!all_taps);
  }
  py::dict trace;
  for (const auto& name : model.tap_order())
    if (all_taps || name == "loc_head" || name == "conf_head") trace[py::str(name)] = array_taking(model.take_tap(name));
  model.drop_trace();
  return trace;
}

// Moves tap `name` out of the model into trace[name] (see Model::take_tap)
template <typename T>
void put_tap(py::dict& trace, Model<T>& model, const std::string& name) {
  if (!model.is_index_tap(name)) {
    trace[py::str(name)] = array_taking(model.take_tap(name));
    return;
  }
  py::array_t<int64_t> values = array_taking(model.take_index_tap(name));
  trace[py::str(name)] = name.rfind("mining.", 0) == 0 ? values.attr("astype")("bool") : py::object(values);
}

// A training batch from Python: images (B,3,S,S) and per-image boxes and labels, validated.
template <typename T>
struct Batch {
  Tensor<T> images;
  std::vector<Tensor<T>> boxes;
  std::vector<std::vector<int64_t>> labels;
};

template <typename T>
Batch<T> batch_from_python(const Model<T>& model, const py::handle& images_obj, const py::handle& boxes_obj,
                           const py::handle& labels_obj) {
  Batch<T> batch{tensor_from_array<T>(images_obj, "images"), {}, {}};
  check_images(batch.images, model.image_size());
  targets_from_lists(batch.boxes, batch.labels, boxes_obj, labels_obj, batch.images.dim(0), model.num_classes());
  return batch;
}

// {tap: (kind, first, second)} -> StepRouting: ("pool", choice int64, mask uint8), ("relu", force_pass uint8,
// force_block uint8), ("mining", negatives uint8, mask uint8) under "mining.negatives"; None is no routing
StepRouting routing_from_python(const py::handle& routing_obj) {
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

bool is_index_name(const std::string& tap) { return tap.rfind("match.", 0) == 0 || tap.rfind("mining.", 0) == 0; }

std::string tap_key(const py::handle& key, const std::string& arg) {
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

// The geometry of conv2d(inp, weight) with the given stride, pad and dilation, validated; `what` names the call.
template <typename T>
ConvGeometry checked_conv_geometry(const Tensor<T>& inp, const Tensor<T>& weight, int stride, int pad, int dilation,
                                   const std::string& what) {
  if (inp.shape.size() != 4 || weight.shape.size() != 4)
    throw std::invalid_argument(what + " expects inp (B,C,H,W) and weight (OC,C,KH,KW); got " + shape_str(inp.shape) +
                                ", " + shape_str(weight.shape));
  if (weight.dim(1) != inp.dim(1))
    throw std::invalid_argument(what + " channel mismatch: inp " + shape_str(inp.shape) + ", weight " +
                                shape_str(weight.shape));
  if (stride < 1 || pad < 0 || dilation < 1)
    throw std::invalid_argument(what + " needs stride >= 1, pad >= 0, dilation >= 1; got stride=" +
                                std::to_string(stride) + " pad=" + std::to_string(pad) +
                                " dilation=" + std::to_string(dilation));
  const ConvGeometry g{int(inp.dim(1)), int(inp.dim(2)), int(inp.dim(3)), int(weight.dim(0)), int(weight.dim(2)),
                       int(weight.dim(3)), stride, pad, dilation};
  if (g.OH() < 1 || g.OW() < 1)
    throw std::invalid_argument(what + " output would be empty for input " + shape_str(inp.shape) + " and kernel " +
                                shape_str(weight.shape));
  return g;
}

// inp (B,C,H,W), weight (OC,C,KH,KW), bias (OC) -> out (B,OC,OH,OW); reference=True runs the direct loop
template <typename T>
py::array_t<T> conv2d(const py::handle& inp_obj, const py::handle& weight_obj, const py::handle& bias_obj,
                      int stride, int pad, int dilation, bool reference) {
  const Tensor<T> inp = tensor_from_array<T>(inp_obj, "inp");
  const Tensor<T> weight = tensor_from_array<T>(weight_obj, "weight");
  const Tensor<T> bias = tensor_from_array<T>(bias_obj, "bias");
  const ConvGeometry g = checked_conv_geometry(inp, weight, stride, pad, dilation, "conv2d");
  if (bias.shape != std::vector<int64_t>{weight.dim(0)})
    throw std::invalid_argument("conv2d expects bias (OC,) = (" + std::to_string(weight.dim(0)) + ",), got " +
                                shape_str(bias.shape));
  Tensor<T> out({inp.dim(0), g.OC, g.OH(), g.OW()});
  {
    py::gil_scoped_release release;
    GuardedScratch<T> packed_weight;
    const int64_t in_size = int64_t(g.C) * g.H * g.W, out_size = int64_t(g.OC) * g.OH() * g.OW();
    if (reference)
      for (int64_t n = 0; n < inp.dim(0); ++n)
        conv2d_forward_reference(out.ptr() + n * out_size, inp.ptr() + n * in_size, weight.ptr(), bias.ptr(), g);
    else
      conv2d_forward(out.ptr(), inp.ptr(), int(inp.dim(0)), weight.ptr(), g, packed_weight, ConvEpilogue<T>{bias.ptr()});
  }
  return array_taking(std::move(out));
}

// inp (B,C,H,W) -> (out (B,C,OH,OW), argmax (B,C,OH,OW) int64, an index into each input plane): the model's pool
template <typename T>
py::tuple maxpool2d(const py::handle& inp_obj, int kernel, int stride, int pad, bool ceil_mode) {
  const Tensor<T> inp = tensor_from_array<T>(inp_obj, "inp");
  if (inp.shape.size() != 4) throw std::invalid_argument("maxpool2d expects inp (B,C,H,W), got " + shape_str(inp.shape));
  if (kernel < 1 || stride < 1 || pad < 0 || 2 * pad > kernel)
    throw std::invalid_argument("maxpool2d needs kernel >= 1, stride >= 1, 0 <= pad <= kernel/2; got kernel=" +
                                std::to_string(kernel) + " stride=" + std::to_string(stride) + " pad=" +
                                std::to_string(pad));
  const PoolGeometry g{int(inp.dim(1)), int(inp.dim(2)), int(inp.dim(3)), kernel, stride, pad, ceil_mode};
  if (g.OH() < 1 || g.OW() < 1)
    throw std::invalid_argument("maxpool2d output would be empty for input " + shape_str(inp.shape));
  Tensor<T> out({inp.dim(0), g.C, g.OH(), g.OW()});
  Tensor<int64_t> argmax(out.shape);
  {
    py::gil_scoped_release release;
    std::vector<int32_t> image_argmax(size_t(out.numel() / std::max<int64_t>(1, inp.dim(0))));
    const int64_t in_size = int64_t(g.C) * g.H * g.W, out_size = int64_t(image_argmax.size());
    for (int64_t n = 0; n < inp.dim(0); ++n) {
      maxpool_forward(out.ptr() + n * out_size, image_argmax.data(), inp.ptr() + n * in_size, g);
      std::copy(image_argmax.begin(), image_argmax.end(), argmax.ptr() + n * out_size);
    }
  }
  return py::make_tuple(array_taking(std::move(out)), array_taking(std::move(argmax)));
}

// dout (B,OC,OH,OW), inp (B,C,H,W), weight (OC,C,KH,KW) -> (grad_inp, grad_weight, grad_bias)
template <typename T>
py::tuple conv2d_backward_binding(const py::handle& dout_obj, const py::handle& inp_obj, const py::handle& weight_obj,
                                  int stride, int pad, int dilation) {
  const Tensor<T> dout = tensor_from_array<T>(dout_obj, "dout");
  const Tensor<T> inp = tensor_from_array<T>(inp_obj, "inp");
  const Tensor<T> weight = tensor_from_array<T>(weight_obj, "weight");
  const ConvGeometry g = checked_conv_geometry(inp, weight, stride, pad, dilation, "conv2d_backward");
  const std::vector<int64_t> out_shape{inp.dim(0), g.OC, g.OH(), g.OW()};
  if (dout.shape != out_shape)
    throw std::invalid_argument("conv2d_backward expects dout of the output's shape " + shape_str(out_shape) +
                                ", got " + shape_str(dout.shape));
  Tensor<T> grad_inp(inp.shape), grad_weight(weight.shape), grad_bias({weight.dim(0)});
  {
    py::gil_scoped_release release;
    ConvBackwardScratch<T> scratch;
    conv2d_backward(grad_inp.ptr(), grad_weight.ptr(), grad_bias.ptr(), dout.ptr(), inp.ptr(), int(inp.dim(0)),
                    weight.ptr(), g, scratch);
  }
  return py::make_tuple(array_taking(std::move(grad_inp)), array_taking(std::move(grad_weight)),
                        array_taking(std::move(grad_bias)));
}

void guarded_scratch_probe(int64_t size, int64_t write_begin, int64_t write_end) {
  constexpr int64_t guard = GuardedScratch<float>::kGuardElements;
  if (size < 0 || write_begin < -guard || write_end > size + guard || write_begin > write_end)
    throw std::invalid_argument("guarded_scratch_probe writes must stay within the guards: need 0 <= size and -" +
                                std::to_string(guard) + " <= write_begin <= write_end <= size + " +
                                std::to_string(guard) + ", got size=" + std::to_string(size) +
                                " write_begin=" + std::to_string(write_begin) + " write_end=" + std::to_string(write_end));
  GuardedScratch<float> scratch;
  float* data = scratch.resize(size);
  for (int64_t i = write_begin; i < write_end; ++i) data[i] = 1.0f;
  scratch.check("guarded_scratch_probe");
}

void set_faults(const std::vector<std::string>& names) {
  uint32_t mask = 0;
  for (const auto& name : names) {
    const auto* found = std::find(kFaultNames.begin(), kFaultNames.end(), name);
    if (found == kFaultNames.end()) {
      std::string known;
      for (const char* n : kFaultNames) known += std::string(known.empty() ? "" : ", ") + n;
      throw std::invalid_argument("unknown fault '" + name + "'; known faults: " + known);
    }
    mask |= 1u << (found - kFaultNames.begin());
  }
  g_active_faults.store(mask);
}

// -> {"loss.loc", "loss.conf", "loss.total"} of the model's last loss, as Python floats
template <typename T>
py::dict losses(const Model<T>& model) {
  py::dict out;
  for (const char* name : {"loss.loc", "loss.conf", "loss.total"}) out[name] = double(model.tap(name).data.at(0));
  return out;
}

// One training step: forward, loss, backward, SGD update; -> the losses taken before the update
template <typename T>
py::dict train_step(Model<T>& model, const py::handle& images_obj, const py::handle& boxes_obj,
                    const py::handle& labels_obj, const SgdConfig& config) {
  const Batch<T> batch = batch_from_python(model, images_obj, boxes_obj, labels_obj);
  check_sgd_config(config);
  {
    py::gil_scoped_release release;
    model.forward(batch.images);
    model.loss(batch.boxes, batch.labels);
    model.backward(/*keep_tap_grads=*/false, /*keep_taps=*/false);
    model.sgd_step(config);
  }
  return losses(model);
}

// Forward and loss only (no gradient): -> the losses, or with all_taps every forward and loss tap in execution
// order (what a trajectory's validation judges)
template <typename T>
py::dict evaluate(Model<T>& model, const py::handle& images_obj, const py::handle& boxes_obj,
                  const py::handle& labels_obj, bool all_taps) {
  const Batch<T> batch = batch_from_python(model, images_obj, boxes_obj, labels_obj);
  {
    py::gil_scoped_release release;
    model.forward(batch.images);
    model.loss(batch.boxes, batch.labels);
  }
  if (!all_taps) return losses(model);
  py::dict trace;
  for (const auto& name : model.tap_order()) put_tap(trace, model, name);
  model.drop_trace();
  return trace;
}

template <typename T>
py::dict state_dict(const Model<T>& model) {
  py::dict out;
  for (const auto& key : model.weight_names()) out[py::str(key)] = array_from_tensor(model.weight_value(key));
  return out;
}

template <typename T>
py::dict momentum_buffers(const Model<T>& model) {
  py::dict out;
  for (const auto& key : model.weight_names())
    if (model.has_momentum(key)) out[py::str(key)] = array_from_tensor(model.momentum_buffer(key));
  return out;
}

SgdConfig sgd_config(double lr, double momentum, double dampening, double weight_decay, bool nesterov) {
  return SgdConfig{lr, momentum, dampening, weight_decay, nesterov};
}

template <typename T>
void bind_model(py::module_& m, const char* name) {
  py::class_<Model<T>>(m, name)
      .def(py::init(&make_model<T>), py::arg("state_dict"),
           "Load a torchvision SSD300 state_dict (any channel widths) by name.")
      .def("forward", &forward<T>, py::arg("images"), py::arg("all_taps") = true,
           "images (B,3,300,300) -> {tap: array} in execution order (loc_head and conf_head only if not all_taps)")
      .def("forward_backward", &forward_backward<T>, py::arg("images"), py::arg("boxes"), py::arg("labels"),
           py::arg("routing") = py::none(),
           "One training step without the update: forward, loss and backward taps, in one dict; with `routing`, "
           "another run's near-tie decisions taken where masked.")
      .def("isolated", &isolated<T>, py::arg("name"), py::arg("inputs"), py::arg("boxes") = py::none(),
           py::arg("labels") = py::none(),
           "Run only the stage producing tap `name` from the given input taps (e.g. the reference's); -> its outputs.")
      .def("isolated_backward", &isolated_backward<T>, py::arg("taps"), py::arg("grads"), py::arg("pool_argmax"),
           py::arg("relu_pass"),
           "Every backward stage fed the given forward state and the given gradient of its output.")
      .def("train_step",
           [](Model<T>& m, const py::handle& images, const py::handle& boxes, const py::handle& labels, double lr,
              double momentum, double dampening, double weight_decay, bool nesterov) {
             return train_step(m, images, boxes, labels, sgd_config(lr, momentum, dampening, weight_decay, nesterov));
           },
           py::arg("images"), py::arg("boxes"), py::arg("labels"), py::arg("lr"), py::arg("momentum") = 0.0,
           py::arg("dampening") = 0.0, py::arg("weight_decay") = 0.0, py::arg("nesterov") = false,
           "Forward, loss, backward and torch.optim.SGD's update; -> the losses taken before the update.")
      .def("sgd_step",
           [](Model<T>& m, double lr, double momentum, double dampening, double weight_decay, bool nesterov) {
             py::gil_scoped_release release;
             m.sgd_step(sgd_config(lr, momentum, dampening, weight_decay, nesterov));
           },
           py::arg("lr"), py::arg("momentum") = 0.0, py::arg("dampening") = 0.0, py::arg("weight_decay") = 0.0,
           py::arg("nesterov") = false, "torch.optim.SGD's update from the last step's parameter gradients.")
      .def("evaluate", &evaluate<T>, py::arg("images"), py::arg("boxes"), py::arg("labels"),
           py::arg("all_taps") = false,
           "Forward and loss without gradient; -> the losses, or with all_taps every forward and loss tap.")
      .def("state_dict", &state_dict<T>, "The current weights, by state_dict key.")
      .def("momentum_buffers", &momentum_buffers<T>, "SGD's momentum buffers, by state_dict key (empty before a step).")
      .def_property_readonly("num_classes", &Model<T>::num_classes)
      .def_property_readonly("num_priors", &Model<T>::num_priors)
      .def_property_readonly("weight_names", &Model<T>::weight_names);
}

}  // namespace

PYBIND11_MODULE(ssd_native, m) {
  m.doc() = "Native C++ SSD300 (float and double builds) for parity checks against torchvision.";
  // OpenMP owns the threads; OpenBLAS runs single-threaded inside them (see gemm.h).
  scipy_openblas_set_num_threads(1);
  apply_kernel_environment();
  bind_model<float>(m, "ModelFloat32");
  bind_model<double>(m, "ModelFloat64");
  m.def("set_num_threads", [](int n) {
    if (n < 1) throw std::invalid_argument("set_num_threads needs n >= 1, got " + std::to_string(n));
    omp_set_num_threads(n);
  }, py::arg("n"), "Threads of the native kernels (OpenMP); results do not depend on it.");
  m.def("get_num_threads", [] { return omp_get_max_threads(); });
  m.def("gemm_kernels", [] {
    return cpu_has_avx512() ? std::vector<std::string>{"avx2", "avx512"} : std::vector<std::string>{"avx2"};
  }, "The register kernels of the packed GEMM that this CPU runs (all give bit-identical results).");
  m.def("gemm_kernel", [] { return std::string(avx512_kernel_on() ? "avx512" : "avx2"); },
        "The register kernel the packed GEMM runs now (the widest this CPU has, unless set_gemm_kernel chose).");
  m.def("set_gemm_kernel", [](const std::string& name) {
    if (name != "avx2" && name != "avx512")
      throw std::invalid_argument("set_gemm_kernel takes 'avx2' or 'avx512', got '" + name + "'");
    if (name == "avx512" && !cpu_has_avx512())
      throw std::invalid_argument("set_gemm_kernel('avx512'): this CPU does not report AVX-512F");
    avx512_kernel_on() = name == "avx512";
  }, py::arg("name"), "Choose the packed GEMM's register kernel, process-wide.");
  m.def("direct_columns", [] { return direct_columns_on().load(); },
        "Whether stride-1 convolutions read interior column panels in place instead of packing them.");
  m.def("set_direct_columns", [](bool on) { direct_columns_on() = on; }, py::arg("on"),
        "Read interior column panels in place (True, the default) or pack every panel; results are bit-identical.");
  m.def("conv3x3_kernel", [] { return conv3x3_kernel_on().load(); },
        "Whether 3x3 stride-1, pad-1 convolutions run on the direct kernels: the forward at 8 to 128 input channels "
        "(conv3x3.h), the weight gradient on maps at least 128 wide (conv3x3_weight_grad.h).");
  m.def("set_conv3x3_kernel", [](bool on) { conv3x3_kernel_on() = on; }, py::arg("on"),
        "Run those convolutions on the 3x3 kernels (True, the default) or on the im2col GEMM, which rounds "
        "differently (within the same tolerances).");
  m.def("fault_names", [] { return std::vector<std::string>(kFaultNames.begin(), kFaultNames.end()); },
        "Every fault switch (a known porting bug the native model can reproduce), in catalogue order.");
  m.def("set_faults", &set_faults, py::arg("names"),
        "Switch on exactly the named faults (an empty list switches all off); process-wide.");
  m.def("active_faults", [] {
    std::vector<std::string> names;
    for (int i = 0; i < int(Fault::Count); ++i)
      if (fault_on(Fault(i))) names.push_back(kFaultNames[i]);
    return names;
  });
  m.def("guarded_scratch_probe", &guarded_scratch_probe, py::arg("size"), py::arg("write_begin"), py::arg("write_end"),
        "Write 1.0 into elements [write_begin, write_end) of a fresh guarded scratch buffer of `size` elements (any "
        "range within its guard regions) and run the guard check: the self-test of the scratch guards.");
  m.def("conv2d_float32", &conv2d<float>, py::arg("inp"), py::arg("weight"), py::arg("bias"), py::arg("stride") = 1,
        py::arg("pad") = 0, py::arg("dilation") = 1, py::arg("reference") = false);
  m.def("conv2d_float64", &conv2d<double>, py::arg("inp"), py::arg("weight"), py::arg("bias"), py::arg("stride") = 1,
        py::arg("pad") = 0, py::arg("dilation") = 1, py::arg("reference") = false);
  m.def("maxpool2d_float32", &maxpool2d<float>, py::arg("inp"), py::arg("kernel"), py::arg("stride"),
        py::arg("pad") = 0, py::arg("ceil_mode") = false, "-> (out, argmax)");
  m.def("maxpool2d_float64", &maxpool2d<double>, py::arg("inp"), py::arg("kernel"), py::arg("stride"),
        py::arg("pad") = 0, py::arg("ceil_mode") = false, "-> (out, argmax)");
  m.def("conv2d_backward_float32", &conv2d_backward_binding<float>, py::arg("dout"), py::arg("inp"), py::arg("weight"),
        py::arg("stride") = 1, py::arg("pad") = 0, py::arg("dilation") = 1, "-> (grad_inp, grad_weight, grad_bias)");
  m.def("conv2d_backward_float64", &conv2d_backward_binding<double>, py::arg("dout"), py::arg("inp"), py::arg("weight"),
        py::arg("stride") = 1, py::arg("pad") = 0, py::arg("dilation") = 1, "-> (grad_inp, grad_weight, grad_bias)");
}

// Python bindings of the native SSD300: its model API (build, forward, train step, evaluate, weights) here, the
// harness's instrumentation (bindings_instrumentation.h) and its test switches and kernels
// (bindings_test_kernels.h) beside it. Only these files and array_checks.h know pybind11.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <omp.h>

#include <string>

#include "bindings_common.h"
#include "bindings_instrumentation.h"
#include "bindings_test_kernels.h"
#include "kernel_environment.h"
#include "module_switches.h"
#include "openblas.h"

namespace py = pybind11;
using namespace ssd;
using namespace ssd::bindings;

namespace {

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
  py::class_<Model<T>> model(m, name);
  model
      .def(py::init(&make_model<T>), py::arg("state_dict"),
           "Load a torchvision SSD300 state_dict (any channel widths) by name.")
      .def("forward", &forward<T>, py::arg("images"), py::arg("all_taps") = true,
           "images (B,3,300,300) -> {tap: array} in execution order (loc_head and conf_head only if not all_taps)")
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
  bind_instrumentation(model);
}

}  // namespace

PYBIND11_MODULE(ssd_native, m) {
  m.doc() = "Native C++ SSD300 (float and double builds) for parity checks against torchvision.";
  apply_kernel_environment();
  openblas();  // loaded now, with the kernels the environment asks for (openblas.h)
  bind_model<float>(m, "ModelFloat32");
  bind_model<double>(m, "ModelFloat64");
  bind_thread_count(m);
  bind_harness_switches(m);
  bind_test_kernels(m);
}

// Python bindings of the native ResNet-8: the model's API (build from a state_dict, one training step, the weights)
// and the harness's switches (faults, threads). pybind11 stops here.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <omp.h>

#include <algorithm>
#include <string>

#include "array_checks.h"
#include "kernel_environment.h"
#include "module_switches.h"
#include "openblas.h"
#include "resnet8/resnet8_model.h"

namespace py = pybind11;
using namespace ssd;
using namespace ssd::resnet8;

namespace {

bool is_batch_counter(const std::string& key) {
  const std::string suffix = ".num_batches_tracked";
  return key.size() > suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// state_dict (key -> numpy array): float arrays of dtype T, each BatchNorm's num_batches_tracked an int64 scalar
template <typename T>
Model<T> make_model(const py::dict& state_dict) {
  typename Model<T>::Weights weights;
  std::map<std::string, int64_t> counters;
  for (const auto& [key, value] : state_dict) {
    if (!py::isinstance<py::str>(key)) throw py::type_error("state_dict keys must be str, got " + std::string(py::repr(key)));
    const std::string name = py::str(key);
    if (is_batch_counter(name)) {
      const Tensor<int64_t> counter = tensor_from_array<int64_t>(value, "state_dict['" + name + "']");
      if (counter.numel() != 1)
        throw std::invalid_argument("state_dict['" + name + "'] has shape " + shape_str(counter.shape) + ", expected ()");
      counters[name] = counter.data[0];
    } else {
      weights[name] = tensor_from_array<T>(value, "state_dict['" + name + "']");
    }
  }
  return Model<T>(std::move(weights), std::move(counters));
}

// images (B,3,32,32) of dtype T, labels (B,) int64 in [0, 10) -> the step's whole trace, in the reference's order
template <typename T>
py::dict train_step(Model<T>& model, const py::handle& images_obj, const py::handle& labels_obj, double lr,
                    double momentum, double weight_decay) {
  Tensor<T> images = tensor_from_array<T>(images_obj, "images");
  check_images(images, kImageSize);
  const Tensor<int64_t> labels = tensor_from_array<int64_t>(labels_obj, "labels");
  if (labels.shape != std::vector<int64_t>{images.dim(0)})
    throw std::invalid_argument("argument 'labels' has shape " + shape_str(labels.shape) + ", expected (" +
                                std::to_string(images.dim(0)) + ",): one label per image");
  for (int64_t i = 0; i < labels.numel(); ++i)
    if (labels.data[i] < 0 || labels.data[i] >= kNumClasses)
      throw std::invalid_argument("labels[" + std::to_string(i) + "] is " + std::to_string(labels.data[i]) +
                                  ", expected a class in [0, " + std::to_string(kNumClasses) + ")");
  if (!(lr >= 0) || !(momentum >= 0) || !(weight_decay >= 0))
    throw std::invalid_argument("lr, momentum and weight_decay must be >= 0, got " + std::to_string(lr) + ", " +
                                std::to_string(momentum) + ", " + std::to_string(weight_decay));
  SgdConfig sgd;
  sgd.lr = lr;
  sgd.momentum = momentum;
  sgd.weight_decay = weight_decay;
  typename Model<T>::Trace trace;
  {
    py::gil_scoped_release release;
    trace = model.train_step(images, std::vector<int64_t>(labels.data.begin(), labels.data.end()), sgd);
  }
  py::dict out;
  for (auto& [name, value] : trace) out[py::str(name)] = array_taking(std::move(value));
  for (const auto& [key, count] : model.batches_tracked()) out[py::str("buffer/" + key)] = py::int_(count);
  return out;
}

template <typename T>
py::dict state_dict(const Model<T>& model) {
  py::dict out;
  for (const auto& [key, value] : model.weights()) out[py::str(key)] = array_from_tensor(value);
  for (const auto& [key, count] : model.batches_tracked()) out[py::str(key)] = py::int_(count);
  return out;
}

template <typename T>
void bind_model(py::module_& m, const char* name) {
  py::class_<Model<T>>(m, name)
      .def(py::init(&make_model<T>), py::arg("state_dict"),
           "Build from the reference's state_dict (every parameter and buffer, by key).")
      .def("train_step", &train_step<T>, py::arg("images"), py::arg("labels"), py::arg("lr"), py::arg("momentum") = 0.0,
           py::arg("weight_decay") = 0.0,
           "One training step (BatchNorm in training mode, cross-entropy, backward, SGD) -> every tap, gradient, "
           "parameter, buffer and momentum buffer, by name.")
      .def("state_dict", &state_dict<T>, "The current parameters and buffers, by state_dict key.");
}

}  // namespace

PYBIND11_MODULE(resnet8_native, m) {
  m.doc() = "Native C++ ResNet-8 (float and double builds) for parity checks against its PyTorch reference.";
  apply_kernel_environment();
  openblas();  // loaded now, with the kernels the environment asks for (openblas.h)
  bind_model<float>(m, "ModelFloat32");
  bind_model<double>(m, "ModelFloat64");
  bind_thread_count(m);
  bind_fault_switches(m, kFaultNames, g_active_faults, "a known BatchNorm porting bug");
}

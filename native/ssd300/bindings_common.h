// The SSD300 bindings' shared pieces: a model from a state_dict, a validated training batch, taps moved out.
#pragma once
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "array_checks.h"
#include "ssd_model.h"

namespace ssd::bindings {
namespace py = pybind11;

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

}  // namespace ssd::bindings

// The checked boundary between Python and the kernels: every array is validated here, once, and an error names
// the argument and the value received. Kernels behind this point never validate.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "tensor.h"

namespace ssd {
namespace py = pybind11;

template <typename T>
std::string dtype_name() {
  return py::str(py::dtype::of<T>());
}

inline std::string describe_shape(const py::array& a) {
  std::vector<int64_t> s(a.shape(), a.shape() + a.ndim());
  return shape_str(s);
}

// obj must be a C-contiguous numpy array of dtype T; it is copied into a Tensor the model owns (left unfilled until
// the copy: zero-filling first wrote every input twice, a GB per isolated backward at SSD300 batch 4).
template <typename T>
Tensor<T> tensor_from_array(const py::handle& obj, const std::string& arg) {
  if (!py::isinstance<py::array>(obj))
    throw py::type_error("argument '" + arg + "' must be a numpy.ndarray, got " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  py::array a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().is(py::dtype::of<T>()))
    throw py::type_error("argument '" + arg + "' has dtype " + std::string(py::str(a.dtype())) + ", expected " +
                         dtype_name<T>());
  if (!(a.flags() & py::array::c_style))
    throw std::invalid_argument("argument '" + arg + "' with shape " + describe_shape(a) +
                                " is not C-contiguous; pass numpy.ascontiguousarray(" + arg + ")");
  Tensor<T> t(std::vector<int64_t>(a.shape(), a.shape() + a.ndim()), Uninitialized{});
  if (t.numel() > 0) std::memcpy(t.ptr(), a.data(), sizeof(T) * size_t(t.numel()));
  return t;
}

template <typename T>
py::array_t<T> array_from_tensor(const Tensor<T>& t) {
  py::array_t<T> out(t.shape);
  if (t.numel() > 0) std::memcpy(out.mutable_data(), t.ptr(), sizeof(T) * size_t(t.numel()));
  return out;
}

// t -> a numpy array that owns t's storage (no copy): the array frees it when Python drops the array
template <typename T>
py::array_t<T> array_taking(Tensor<T>&& t) {
  auto* owner = new Tensor<T>(std::move(t));
  py::capsule free_with_array(owner, [](void* p) { delete static_cast<Tensor<T>*>(p); });
  return py::array_t<T>(owner->shape, owner->ptr(), free_with_array);
}

// images must be (B, 3, size, size) with B >= 1.
template <typename T>
void check_images(const Tensor<T>& images, int size) {
  const auto& s = images.shape;
  if (s.size() != 4)
    throw std::invalid_argument("argument 'images' must have 4 dimensions (B, 3, H, W), got shape " + shape_str(s));
  if (s[0] < 1) throw std::invalid_argument("argument 'images' has batch size " + std::to_string(s[0]) + ", expected >= 1");
  if (s[1] != 3)
    throw std::invalid_argument("argument 'images' has " + std::to_string(s[1]) + " channels, expected 3 (RGB)");
  if (s[2] != size || s[3] != size)
    throw std::invalid_argument("argument 'images' is " + std::to_string(s[2]) + "x" + std::to_string(s[3]) +
                                ", expected " + std::to_string(size) + "x" + std::to_string(size));
}

// Ground truth of one batch: boxes[i] (n_i,4) xyxy pixels of dtype T, labels[i] (n_i,) int64 in [0, K).
// Degenerate boxes are rejected as torchvision's SSD.forward rejects them.
template <typename T>
void targets_from_lists(std::vector<Tensor<T>>& boxes, std::vector<std::vector<int64_t>>& labels,
                        const py::handle& boxes_obj, const py::handle& labels_obj, int64_t batch, int num_classes) {
  if (!py::isinstance<py::sequence>(boxes_obj) || !py::isinstance<py::sequence>(labels_obj))
    throw py::type_error("arguments 'boxes' and 'labels' must be lists of arrays, one per image");
  const py::sequence box_list = py::reinterpret_borrow<py::sequence>(boxes_obj);
  const py::sequence label_list = py::reinterpret_borrow<py::sequence>(labels_obj);
  if (int64_t(box_list.size()) != batch || int64_t(label_list.size()) != batch)
    throw std::invalid_argument("got " + std::to_string(box_list.size()) + " box arrays and " +
                                std::to_string(label_list.size()) + " label arrays for a batch of " +
                                std::to_string(batch) + " images");
  for (int64_t i = 0; i < batch; ++i) {
    const std::string box_arg = "boxes[" + std::to_string(i) + "]", label_arg = "labels[" + std::to_string(i) + "]";
    Tensor<T> b = tensor_from_array<T>(box_list[i], box_arg);
    if (b.shape.size() != 2 || b.shape[1] != 4)
      throw std::invalid_argument("argument '" + box_arg + "' must have shape (n, 4), got " + shape_str(b.shape));
    for (int64_t j = 0; j < b.dim(0); ++j) {
      const T* box = b.ptr() + 4 * j;
      const std::string text = "[" + std::to_string(box[0]) + ", " + std::to_string(box[1]) + ", " +
                               std::to_string(box[2]) + ", " + std::to_string(box[3]) + "]";
      for (int c = 0; c < 4; ++c)
        if (!std::isfinite(box[c]))
          throw std::invalid_argument("argument '" + box_arg + "' box " + std::to_string(j) + " is not finite: " + text);
      if (!(box[2] > box[0]) || !(box[3] > box[1]))
        throw std::invalid_argument("All bounding boxes should have positive height and width. Found invalid box " +
                                    text + " for target at index " + std::to_string(i) + " (box " + std::to_string(j) + ")");
    }
    if (!py::isinstance<py::array>(label_list[i]))
      throw py::type_error("argument '" + label_arg + "' must be a numpy.ndarray of int64");
    py::array l = py::reinterpret_borrow<py::array>(label_list[i]);
    if (!l.dtype().is(py::dtype::of<int64_t>()))
      throw py::type_error("argument '" + label_arg + "' has dtype " + std::string(py::str(l.dtype())) + ", expected int64");
    if (l.ndim() != 1 || l.shape(0) != b.dim(0))
      throw std::invalid_argument("argument '" + label_arg + "' must have shape (" + std::to_string(b.dim(0)) +
                                  ",) to match " + box_arg + ", got " + describe_shape(l));
    std::vector<int64_t> values(size_t(l.shape(0)));
    for (int64_t j = 0; j < l.shape(0); ++j) {
      values[j] = *static_cast<const int64_t*>(l.data(j));
      if (values[j] < 0 || values[j] >= num_classes)
        throw std::invalid_argument("argument '" + label_arg + "' holds label " + std::to_string(values[j]) +
                                    " at " + std::to_string(j) + ", expected 0 <= label < " + std::to_string(num_classes));
    }
    boxes.push_back(std::move(b));
    labels.push_back(std::move(values));
  }
}

}  // namespace ssd

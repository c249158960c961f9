// The checked boundary between Python and the kernels: every array is validated here, once, and an error names
// the argument and the value received. Kernels behind this point never validate.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "tensor.h"

namespace ssd {
namespace py = pybind11;

template <typename T>
const char* dtype_name() {
  return sizeof(T) == 4 ? "float32" : "float64";
}

inline std::string describe_shape(const py::array& a) {
  std::vector<int64_t> s(a.shape(), a.shape() + a.ndim());
  return shape_str(s);
}

// obj must be a C-contiguous numpy array of dtype T; it is copied into a Tensor the model owns.
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
  Tensor<T> t(std::vector<int64_t>(a.shape(), a.shape() + a.ndim()));
  if (t.numel() > 0) std::memcpy(t.ptr(), a.data(), sizeof(T) * size_t(t.numel()));
  return t;
}

template <typename T>
py::array_t<T> array_from_tensor(const Tensor<T>& t) {
  py::array_t<T> out(t.shape);
  if (t.numel() > 0) std::memcpy(out.mutable_data(), t.ptr(), sizeof(T) * size_t(t.numel()));
  return out;
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

}  // namespace ssd

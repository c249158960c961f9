// Python bindings of tensor_stats.h: every array is checked here (numpy.ndarray, dtype, C-contiguous, sizes) and a
// mismatch raises with the value received; the kernels behind never validate.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "tensor_stats.h"

namespace py = pybind11;
using namespace tensor_stats;

namespace {

template <typename T>
const T* data_of(const py::handle& obj, const char* arg) {
  if (!py::isinstance<py::array>(obj))
    throw py::type_error(std::string("argument '") + arg + "' must be a numpy.ndarray, got " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  py::array a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().equal(py::dtype::of<T>()))
    throw py::type_error(std::string("argument '") + arg + "' has dtype " + std::string(py::str(a.dtype())) +
                         ", expected " + std::string(py::str(py::dtype::of<T>())));
  if (!(a.flags() & py::array::c_style))
    throw std::invalid_argument(std::string("argument '") + arg + "' is not C-contiguous");
  return static_cast<const T*>(a.data());
}

int64_t size_of(const py::handle& obj) { return int64_t(py::reinterpret_borrow<py::array>(obj).size()); }

void check_same_size(const py::handle& a, const char* name_a, const py::handle& b, const char* name_b) {
  if (size_of(a) != size_of(b))
    throw std::invalid_argument(std::string("arguments '") + name_a + "' and '" + name_b + "' differ in size: " +
                                std::to_string(size_of(a)) + " and " + std::to_string(size_of(b)));
}

template <typename T>
py::dict finite_scan_of(const py::handle& a) {
  const T* data = data_of<T>(a, "a");
  FiniteScan s;
  {
    py::gil_scoped_release release;
    s = finite_scan(data, size_of(a));
  }
  py::dict out;
  out["nan"] = s.nan, out["posinf"] = s.posinf, out["neginf"] = s.neginf, out["max_abs"] = s.max_abs;
  return out;
}

py::dict reference_error_of(const py::handle& reference, const py::handle& oracle) {
  const float* r = data_of<float>(reference, "reference");
  const double* o = data_of<double>(oracle, "oracle");
  check_same_size(reference, "reference", oracle, "oracle");
  ReferenceError s;
  {
    py::gil_scoped_release release;
    s = reference_error(r, o, size_of(reference));
  }
  py::dict out;
  out["largest"] = s.largest, out["energy"] = s.energy, out["finite"] = s.finite, out["scale"] = s.scale;
  out["nonzero"] = s.nonzero;
  return out;
}

py::dict native_stats_of(const py::handle& native, const py::handle& reference, const py::handle& oracle,
                         double reference_scale) {
  const float* a = data_of<float>(native, "native");
  const float* r = data_of<float>(reference, "reference");
  const double* o = data_of<double>(oracle, "oracle");
  check_same_size(native, "native", reference, "reference");
  check_same_size(native, "native", oracle, "oracle");
  NativeStats s;
  {
    py::gil_scoped_release release;
    s = native_stats(a, r, o, size_of(native), reference_scale);
  }
  py::list worst, worst_errors;
  for (int k = 0; k < s.worst.count; ++k) worst.append(s.worst.index[k]), worst_errors.append(s.worst.error[k]);
  py::dict out;
  out["largest_diff"] = s.largest_diff, out["largest_rel"] = s.largest_rel, out["diff_energy"] = s.diff_energy;
  out["energy"] = s.energy, out["actual_energy"] = s.actual_energy, out["cross"] = s.cross;
  out["max_ulp"] = s.max_ulp < 0 ? py::object(py::none()) : py::object(py::int_(s.max_ulp));
  out["oracle_largest"] = s.oracle_largest, out["oracle_energy"] = s.oracle_energy;
  out["worst"] = worst, out["worst_errors"] = worst_errors;
  return out;
}

int64_t count_beyond_of(const py::handle& native, const py::handle& oracle, double bound) {
  const float* a = data_of<float>(native, "native");
  const double* o = data_of<double>(oracle, "oracle");
  check_same_size(native, "native", oracle, "oracle");
  py::gil_scoped_release release;
  return count_beyond(a, o, size_of(native), bound);
}

template <typename B>
py::dict margins_of(const py::handle& side, const py::handle& oracle, const py::handle& bound) {
  const float* s = data_of<float>(side, "side");
  const double* o = data_of<double>(oracle, "oracle");
  const B* b = data_of<B>(bound, "bound");
  check_same_size(side, "side", oracle, "oracle");
  check_same_size(side, "side", bound, "bound");
  Margins m;
  {
    py::gil_scoped_release release;
    m = margins(s, o, b, size_of(side));
  }
  py::list worst, worst_margins;
  for (int k = 0; k < m.worst.count; ++k) worst.append(m.worst.index[k]), worst_margins.append(m.worst.error[k]);
  py::dict out;
  out["beyond"] = m.beyond, out["largest"] = m.largest, out["largest_error"] = m.largest_error;
  out["worst"] = worst, out["worst_margins"] = worst_margins;
  return out;
}

py::array_t<float> round_up_to_float32_of(const py::handle& bound) {
  const double* b = data_of<double>(bound, "bound");
  py::array_t<float> out(size_of(bound));
  float* o = out.mutable_data();
  {
    py::gil_scoped_release release;
    round_up_to_float32(b, o, size_of(bound));
  }
  return out;
}

double largest_difference_of(const py::handle& native64, const py::handle& oracle) {
  const double* a = data_of<double>(native64, "native64");
  const double* o = data_of<double>(oracle, "oracle");
  check_same_size(native64, "native64", oracle, "oracle");
  py::gil_scoped_release release;
  return largest_difference(a, o, size_of(native64));
}

}  // namespace

PYBIND11_MODULE(tensor_stats, m) {
  m.doc() = "The parity comparison's per-tensor statistics in one pass (parity/kernels/tensor_stats.h).";
  m.def("finite_scan", [](const py::handle& a) {
    if (py::isinstance<py::array>(a) && py::reinterpret_borrow<py::array>(a).dtype().equal(py::dtype::of<float>()))
      return finite_scan_of<float>(a);
    return finite_scan_of<double>(a);
  }, py::arg("a"), "float32/float64 array -> {nan, posinf, neginf, max_abs over the finite elements}");
  m.def("reference_error", &reference_error_of, py::arg("reference"), py::arg("oracle"),
        "float32 reference, float64 oracle -> {largest, energy, finite, scale, nonzero}");
  m.def("native_stats", &native_stats_of, py::arg("native"), py::arg("reference"), py::arg("oracle"),
        py::arg("reference_scale"),
        "float32 native and reference, float64 oracle, all finite -> metrics against the reference and errors "
        "against the oracle");
  m.def("count_beyond", &count_beyond_of, py::arg("native"), py::arg("oracle"), py::arg("bound"),
        "elements with |native - oracle| > bound");
  m.def("margins", [](const py::handle& side, const py::handle& oracle, const py::handle& bound) {
    const bool float32 = py::isinstance<py::array>(bound) &&
                         py::reinterpret_borrow<py::array>(bound).dtype().equal(py::dtype::of<float>());
    if (float32) return margins_of<float>(side, oracle, bound);
    return margins_of<double>(side, oracle, bound);
  }, py::arg("side"), py::arg("oracle"), py::arg("bound"),
        "float32 side, float64 oracle, float32/float64 bound -> {beyond, largest, largest_error, worst, "
        "worst_margins}");
  m.def("round_up_to_float32", &round_up_to_float32_of, py::arg("bound"),
        "float64 array -> 1-D float32 array, each element the nearest float32 not below it");
  m.def("largest_difference", &largest_difference_of, py::arg("native64"), py::arg("oracle"),
        "max |native64 - oracle| where the oracle is finite (NaN if any such difference is NaN)");
}

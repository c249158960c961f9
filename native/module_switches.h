// What every native module exposes beside its model: the OpenMP thread count and its fault switches by name.
#pragma once
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ssd {

// names -> a bit per fault of `known` (its catalogue, in order); an unknown name is an error listing the known ones
template <size_t N>
uint32_t fault_mask(const std::vector<std::string>& names, const std::array<const char*, N>& known) {
  uint32_t mask = 0;
  for (const auto& name : names) {
    const auto* found = std::find(known.begin(), known.end(), name);
    if (found == known.end()) {
      std::string list;
      for (const char* n : known) list += std::string(list.empty() ? "" : ", ") + n;
      throw std::invalid_argument("unknown fault '" + name + "'; known faults: " + list);
    }
    mask |= 1u << (found - known.begin());
  }
  return mask;
}

// fault_names, set_faults and active_faults over a catalogue `known` and its switch word `active`
template <size_t N>
void bind_fault_switches(pybind11::module_& m, const std::array<const char*, N>& known, std::atomic<uint32_t>& active,
                         const char* what) {
  namespace py = pybind11;
  m.def("fault_names", [&known] { return std::vector<std::string>(known.begin(), known.end()); },
        (std::string("Every fault switch (") + what + "), in catalogue order.").c_str());
  m.def("set_faults", [&known, &active](const std::vector<std::string>& names) { active.store(fault_mask(names, known)); },
        py::arg("names"), "Switch on exactly the named faults (an empty list switches all off); process-wide.");
  m.def("active_faults", [&known, &active] {
    std::vector<std::string> names;
    for (size_t i = 0; i < N; ++i)
      if (active.load() & (1u << i)) names.push_back(known[i]);
    return names;
  });
}

inline void bind_thread_count(pybind11::module_& m) {
  namespace py = pybind11;
  m.def("set_num_threads", [](int n) {
    if (n < 1) throw std::invalid_argument("set_num_threads needs n >= 1, got " + std::to_string(n));
    omp_set_num_threads(n);
  }, py::arg("n"), "Threads of the native kernels (OpenMP); results do not depend on it.");
  m.def("get_num_threads", [] { return omp_get_max_threads(); });
}

}  // namespace ssd

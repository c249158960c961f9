// A port that is not a Python module: reads a scenario's inputs with parity_dump.h, runs this project's native
// SSD300 through its C++ API (native/ssd300/ssd_model.h), and writes a full step dump: forward taps, loss tensors,
// indices, every tap gradient and every parameter gradient. `make example-port` builds and runs it on the
// narrow scenario and compares the dump.
//
//   ssd_port INPUTS_DIR DUMP_DIR [STAGES_DIR]   (DUMP_DIR must exist)
//   SSD_PORT_FAULT=<name> ssd_port ...           one of the catalogued faults (native/ssd300/faults.h) switched on
// With STAGES_DIR (python -m parity stage-inputs), every stage is also computed alone from the reference's inputs
// to it (STAGES_DIR/stages.txt) and written as isolated/<name>: the harness then gives the isolated verdicts.
#define PARITY_DUMP_IMPLEMENTATION
#include "parity_dump.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "openblas.h"
#include "ssd300/ssd_model.h"

namespace {

using ssd::Tensor;

// The input `name` as a float or int64 tensor; exits with the reader's message if it is missing or malformed.
template <typename V>
Tensor<V> input(pd_inputs& in, const std::string& name) {
  const pd_entry* e = pd_find(&in, name.c_str());
  if (!e) std::fprintf(stderr, "%s/index.txt: no tensor '%s'\n", in.dir, name.c_str()), std::exit(2);
  const bool is_float = std::strcmp(e->dtype, "float32") == 0;
  if (is_float != std::is_same_v<V, float>)
    std::fprintf(stderr, "%s: dtype %s, expected %s\n", name.c_str(), e->dtype, is_float ? "int64" : "float32"),
        std::exit(2);
  std::unique_ptr<void, decltype(&std::free)> data(pd_read(&in, e), &std::free);
  if (!data) std::fprintf(stderr, "%s\n", pd_error), std::exit(2);
  Tensor<V> t(std::vector<int64_t>(e->dims, e->dims + e->rank));
  std::memcpy(t.ptr(), data.get(), sizeof(V) * size_t(t.numel()));
  return t;
}

template <typename V>
void put(pd_writer& w, const std::string& name, const char* dtype, const Tensor<V>& t) {
  if (pd_write(&w, name.c_str(), dtype, int(t.shape.size()), t.shape.data(), t.ptr()) != 0)
    std::fprintf(stderr, "%s\n", pd_error), std::exit(1);
}

bool is_index(const std::string& name) { return name.rfind("match.", 0) == 0 || name.rfind("mining.", 0) == 0; }

// A stage input as the native API takes it: index tensors (match.*, mining.*; int64 or 0/1 bytes) as int64.
Tensor<int64_t> index_input(pd_inputs& in, const pd_entry& e) {
  if (std::strcmp(e.dtype, "uint8") != 0) return input<int64_t>(in, e.name);
  std::unique_ptr<void, decltype(&std::free)> data(pd_read(&in, &e), &std::free);
  if (!data) std::fprintf(stderr, "%s\n", pd_error), std::exit(2);
  Tensor<int64_t> t(std::vector<int64_t>(e.dims, e.dims + e.rank));
  for (int64_t i = 0; i < t.numel(); ++i) t.data[size_t(i)] = static_cast<const uint8_t*>(data.get())[i];
  return t;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> names;
  std::stringstream stream(list);
  for (std::string name; std::getline(stream, name, ',');)
    if (name != "-") names.push_back(name);
  return names;
}

// Every recorded tap (a step's, or an isolated stage's outputs), written as <prefix><name>.
void put_recorded(pd_writer& w, ssd::Model<float>& model, const std::string& prefix) {
  for (const auto& name : model.tap_order()) {
    if (!model.is_index_tap(name)) {
      put(w, prefix + name, "float32", model.take_tap(name));
      continue;
    }
    Tensor<int64_t> index = model.take_index_tap(name);
    if (name == "mining.negatives") {  // a mask: 0/1 bytes
      Tensor<uint8_t> mask(index.shape);
      for (int64_t i = 0; i < index.numel(); ++i) mask.data[size_t(i)] = uint8_t(index.data[size_t(i)] != 0);
      put(w, prefix + name, "uint8", mask);
    } else {
      put(w, prefix + name, "int64", index);
    }
  }
}


// Every stage of STAGES_DIR/stages.txt computed alone on the reference's inputs to it.
void isolated_stages(pd_writer& w, const char* dir, ssd::Model<float>& model, const std::vector<Tensor<float>>& boxes,
                     const std::vector<std::vector<int64_t>>& labels) {
  static pd_inputs in;
  if (pd_read_index(&in, dir) != 0) std::fprintf(stderr, "%s\n", pd_error), std::exit(2);
  std::ifstream stages(std::string(dir) + "/stages.txt");
  if (!stages) std::fprintf(stderr, "%s/stages.txt: cannot open\n", dir), std::exit(2);
  for (std::string group, stage, outputs, inputs; stages >> group >> stage >> outputs >> inputs;) {
    std::map<std::string, Tensor<float>> taps, grads;
    std::map<std::string, Tensor<int64_t>> index_taps;
    std::map<std::string, Tensor<uint8_t>> relu_pass;
    const std::vector<std::string> names = inputs == "*" ? std::vector<std::string>() : split(inputs);
    for (int i = 0; i < in.count; ++i) {
      const std::string name = in.entries[i].name;
      if (inputs != "*" && std::find(names.begin(), names.end(), name) == names.end()) continue;
      if (is_index(name)) {
        index_taps[name] = index_input(in, in.entries[i]);
      } else if (name.rfind("grad/", 0) == 0) {
        grads[name.substr(5)] = input<float>(in, name);
      } else if (name.rfind("relu_pass/", 0) == 0) {
        Tensor<int64_t> mask = index_input(in, in.entries[i]);
        relu_pass[name.substr(10)] = Tensor<uint8_t>(mask.shape);
        for (int64_t k = 0; k < mask.numel(); ++k) relu_pass[name.substr(10)].data[size_t(k)] = uint8_t(mask.data[size_t(k)]);
      } else {
        taps[name] = input<float>(in, name);
      }
    }
    if (group == "backward") {  // every backward stage from the gradient of its output; pools take their own windows
      model.isolated_backward(std::move(taps), std::move(index_taps), grads, {}, std::move(relu_pass));
      for (const auto& tap : model.isolated_grad_order())
        put(w, "isolated/grad/" + tap, "float32", model.take_isolated_grad(tap));
      for (const auto& key : model.weight_names())
        put(w, "isolated/param_grad/" + key, "float32", model.param_grad(key));
    } else {
      model.isolated(stage, std::move(taps), std::move(index_taps), boxes, labels);
      put_recorded(w, model, "isolated/");
    }
    model.drop_trace();
  }
}

void switch_fault_on(const char* name) {
  for (size_t i = 0; i < ssd::kFaultNames.size(); ++i)
    if (std::strcmp(ssd::kFaultNames[i], name) == 0) return ssd::g_active_faults.store(1u << i), void();
  std::fprintf(stderr, "SSD_PORT_FAULT: unknown fault '%s' (native/ssd300/faults.h)\n", name), std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) return std::fprintf(stderr, "usage: %s INPUTS_DIR DUMP_DIR [STAGES_DIR]\n", argv[0]), 2;
  if (const char* fault = std::getenv("SSD_PORT_FAULT")) switch_fault_on(fault);
  ssd::openblas();  // loaded single-threaded, with the kernels SSD_NATIVE_ISA asks for (native/openblas.h)
  static pd_inputs in;  // large: not on the stack
  if (pd_read_index(&in, argv[1]) != 0) return std::fprintf(stderr, "%s\n", pd_error), 2;

  ssd::Model<float>::Weights weights;
  for (int i = 0; i < in.count; ++i)
    if (std::strncmp(in.entries[i].name, "weights/", 8) == 0)
      weights[in.entries[i].name + 8] = input<float>(in, in.entries[i].name);
  Tensor<float> images = input<float>(in, "images");
  const int64_t batch = images.dim(0);
  std::vector<Tensor<float>> boxes;
  std::vector<std::vector<int64_t>> labels;
  for (int64_t b = 0; b < batch; ++b) {
    boxes.push_back(input<float>(in, "boxes/" + std::to_string(b)));
    Tensor<int64_t> l = input<int64_t>(in, "labels/" + std::to_string(b));
    labels.emplace_back(l.data.begin(), l.data.end());
  }

  try {
    ssd::Model<float> model(std::move(weights));
    model.forward(images);
    model.loss(boxes, labels);
    model.backward();

    // The scenario's name is the inputs manifest's; this example is run on the narrow scenario.
    const char* scenario = std::getenv("SSD_PORT_SCENARIO") ? std::getenv("SSD_PORT_SCENARIO") : "narrow";
    pd_writer w;
    if (pd_open(&w, argv[2], scenario, int(batch)) != 0) return std::fprintf(stderr, "%s\n", pd_error), 1;
    put_recorded(w, model, "");
    for (const auto& name : model.tap_order())
      if (model.has_grad(name)) put(w, "grad/" + name, "float32", model.take_grad(name));
    for (const auto& key : model.weight_names()) put(w, "param_grad/" + key, "float32", model.param_grad(key));
    model.drop_trace();
    if (argc == 4) isolated_stages(w, argv[3], model, boxes, labels);
    if (pd_close(&w, &in) != 0) return std::fprintf(stderr, "%s\n", pd_error), 1;
  } catch (const std::exception& error) {
    return std::fprintf(stderr, "ssd_port: %s\n", error.what()), 1;
  }
  return 0;
}

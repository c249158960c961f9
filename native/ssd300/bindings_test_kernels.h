// What the harness's own tests reach into: the kernel paths and fault switches (process-wide), and single kernels
// (conv2d, max pool, conv backward, the scratch guards) with checked arguments. Neither the model's API nor the
// instrumentation contract.
#pragma once
#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bindings_common.h"
#include "kernel_environment.h"
#include "module_switches.h"
#include "openblas.h"

namespace ssd::bindings {

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

inline void guarded_scratch_probe(int64_t size, int64_t write_begin, int64_t write_end) {
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

inline void bind_harness_switches(py::module_& m) {
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
  }, py::arg("name"), "Choose the packed GEMM's register kernel, process-wide (OpenBLAS keeps the kernels it loaded "
                       "with: blas_core).");
  m.def("blas_core", [] { return openblas().core; },
        "The kernels OpenBLAS loaded with (SkylakeX: AVX-512; Haswell: AVX2), chosen when the module loaded: from "
        "OPENBLAS_CORETYPE if set, else from SSD_NATIVE_ISA and the CPU (openblas.h).");
  m.def("direct_columns", [] { return direct_columns_on().load(); },
        "Whether stride-1 convolutions read interior column panels in place instead of packing them.");
  m.def("set_direct_columns", [](bool on) { direct_columns_on() = on; }, py::arg("on"),
        "Read interior column panels in place (True, the default) or pack every panel; results are bit-identical.");
  m.def("weight_grad_gemm", [] { return std::string(packed_weight_grad_on() ? "packed" : "openblas"); },
        "Where the weight gradients of the im2col layers run: the packed GEMM (on AVX-512 CPUs) or OpenBLAS.");
  m.def("set_weight_grad_gemm", [](const std::string& name) {
    if (name != "packed" && name != "openblas")
      throw std::invalid_argument("set_weight_grad_gemm takes 'packed' or 'openblas', got '" + name + "'");
    packed_weight_grad_on() = name == "packed";
  }, py::arg("name"), "Run those weight gradients on the packed GEMM or on OpenBLAS (another summation order, "
                       "within the same tolerances), process-wide.");
  m.def("tap_sets", [] { return tap_sets_on().load(); },
        "Whether dilated convolutions multiply each output pixel by its taps inside the image only (conv_tap_sets.h).");
  m.def("set_tap_sets", [](bool on) { tap_sets_on() = on; }, py::arg("on"),
        "Run dilated convolutions by their sets of inside taps (True, the default) or on the im2col GEMM: the same bits.");
  m.def("conv3x3_kernel", [] { return conv3x3_kernel_on().load(); },
        "Whether 3x3 stride-1, pad-1 convolutions run on the direct kernels: the forward at 8 to 128 input channels "
        "(conv3x3.h), the weight gradient on maps at least 128 wide (conv3x3_weight_grad.h).");
  m.def("set_conv3x3_kernel", [](bool on) { conv3x3_kernel_on() = on; }, py::arg("on"),
        "Run those convolutions on the 3x3 kernels (True, the default) or on the im2col GEMM, which rounds "
        "differently (within the same tolerances).");
  bind_fault_switches(m, kFaultNames, g_active_faults, "a known porting bug the native model can reproduce");
}

inline void bind_test_kernels(py::module_& m) {
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

}  // namespace ssd::bindings

"""The native float path is bit-identical run to run, for 1 vs 2 threads, for the AVX2 vs AVX-512 GEMM kernel (the
weight gradients on it too), for column panels packed vs read in place, for dilated convolutions by tap sets vs on the
im2col GEMM, and for a stage run alone vs inside the whole forward: no float atomics, no reductions whose order depends on the thread count, the vector width or where an
operand is read from."""

import numpy as np
import pytest
import ssd_native

from models.ssd300.reference.taps import FORWARD_TAPS, stage_inputs
from models.ssd300.sides import native_model, native_step
from parity.cases import scenario_for


@pytest.fixture(scope="module")
def step_inputs():
    scenario = scenario_for("narrow", 2)
    return scenario, scenario.images(), scenario.targets()


def _run(step_inputs, threads: int, kernel: str | None = None, direct: bool = True, tap_sets: bool = True) -> dict:
    """One native step; with `kernel`, the packed GEMM on that register tile and the weight gradients on it too."""
    scenario, images, targets = step_inputs
    before = (ssd_native.get_num_threads(), ssd_native.gemm_kernel(), ssd_native.direct_columns(),
              ssd_native.weight_grad_gemm(), ssd_native.tap_sets())
    ssd_native.set_num_threads(threads)
    ssd_native.set_gemm_kernel(kernel or before[1])
    ssd_native.set_direct_columns(direct)
    ssd_native.set_weight_grad_gemm("packed" if kernel else before[3])
    ssd_native.set_tap_sets(tap_sets)
    try:
        return native_step(scenario, images, targets)
    finally:
        ssd_native.set_num_threads(before[0])
        ssd_native.set_gemm_kernel(before[1])
        ssd_native.set_direct_columns(before[2])
        ssd_native.set_weight_grad_gemm(before[3])
        ssd_native.set_tap_sets(before[4])


def _differing(a: dict, b: dict) -> list:
    assert a.keys() == b.keys()
    return [name for name in a if not np.array_equal(a[name], b[name])]


def test_reruns_are_bit_identical(step_inputs):
    assert _differing(_run(step_inputs, 2), _run(step_inputs, 2)) == []


def test_one_and_two_threads_are_bit_identical(step_inputs):
    assert _differing(_run(step_inputs, 1), _run(step_inputs, 2)) == []


def test_thread_count_is_validated():
    with pytest.raises(ValueError, match="n >= 1, got 0"):
        ssd_native.set_num_threads(0)


def test_gemm_kernels_are_bit_identical(step_inputs):
    if "avx512" not in ssd_native.gemm_kernels():
        pytest.skip("this CPU has no AVX-512: only the AVX2 kernel runs here")
    assert _differing(_run(step_inputs, 2, "avx2"), _run(step_inputs, 2, "avx512")) == []


def test_packed_and_direct_columns_are_bit_identical(step_inputs):
    assert _differing(_run(step_inputs, 2, direct=False), _run(step_inputs, 2, direct=True)) == []


def test_tap_sets_and_the_im2col_gemm_are_bit_identical(step_inputs):
    """conv6 (dilation 6) and its input gradient by their sets of inside taps, or on the im2col GEMM."""
    assert _differing(_run(step_inputs, 2, tap_sets=False), _run(step_inputs, 2, tap_sets=True)) == []


def test_gemm_kernel_choice_is_validated():
    with pytest.raises(ValueError, match="'avx2' or 'avx512', got 'sse'"):
        ssd_native.set_gemm_kernel("sse")
    if "avx512" not in ssd_native.gemm_kernels():
        with pytest.raises(ValueError, match="does not report AVX-512F"):
            ssd_native.set_gemm_kernel("avx512")


@pytest.mark.parametrize("config", ["narrow", "ssd300"])
def test_isolated_forward_of_the_own_trace_reproduces_it(config):
    """Every forward stage fed its own input computes exactly what the whole forward did (the isolated head convs run
    the forward's own paired convolution, run_head_pair)."""
    model = native_model(config, 0, "float32")
    image = np.random.default_rng(1).standard_normal((2, 3, 300, 300)).astype(np.float32)
    trace = model.forward(image)
    for tap in FORWARD_TAPS:
        inputs = {name: image if name == "input" else trace[name] for name in stage_inputs(tap)}
        assert np.array_equal(model.isolated(tap, inputs)[tap], trace[tap]), tap

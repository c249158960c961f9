"""The native float path is bit-identical run to run and for 1 vs 2 threads: no float atomics, no reductions
whose order depends on the thread count."""

import numpy as np
import pytest

import ssd_native
from parity.cases import scenario_for
from parity.sides import native_step


@pytest.fixture(scope="module")
def step_inputs():
    scenario = scenario_for("narrow", 2)
    return scenario, scenario.images(), scenario.targets()


def _run(step_inputs, threads: int) -> dict:
    scenario, images, targets = step_inputs
    before = ssd_native.get_num_threads()
    ssd_native.set_num_threads(threads)
    try:
        return native_step(scenario, images, targets)
    finally:
        ssd_native.set_num_threads(before)


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

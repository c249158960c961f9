"""Sample i of a batch-4 run must equal its batch-1 run: bit for bit on the native side (each image's work is
independent of the batch), and within the oracle bound on the reference side (oneDNN blocks differently per
batch size, so the reference is not bit-exact)."""

from functools import lru_cache

import numpy as np
import pytest

from reference.taps import FORWARD_TAPS

from .cases import scenario_for, xdist_group
from .sides import native_forward, reference_forward
from .tolerance import oracle_bound

BATCH = 4
# The full SSD300 runs in the full-SSD300 xdist group, never beside another full-SSD300 case (memory).
CONFIGS = [pytest.param(name, marks=xdist_group(name, BATCH)) for name in ("default", "narrow")]


@lru_cache(maxsize=2)
def _batched(name: str):
    scenario = scenario_for(name, BATCH)
    images = scenario.images()
    return native_forward(scenario, images), reference_forward(scenario, images)


@pytest.fixture(scope="module", autouse=True)
def _forget_batched_runs():
    """The full SSD300's batch-4 forward traces (1 GB) are not kept past this module."""
    yield
    _batched.cache_clear()


def _single_image_runs(name: str, index: int):
    scenario = scenario_for(name, BATCH)
    image = scenario.images()[index : index + 1]
    return (
        native_forward(scenario, image),
        reference_forward(scenario, image),
        reference_forward(scenario, image.astype(np.float64)),
    )


def _sample(name: str, array: np.ndarray, index: int) -> np.ndarray:
    return array if name == "priors" else array[index : index + 1]


@pytest.mark.parametrize("scenario_name", CONFIGS)
@pytest.mark.parametrize("index", range(BATCH))
def test_sample_equals_its_batch1_run(scenario_name, index):
    native_batched, reference_batched = _batched(scenario_name)
    native_alone, reference_alone, oracle = _single_image_runs(scenario_name, index)
    differing = [tap for tap in FORWARD_TAPS if not np.array_equal(_sample(tap, native_batched[tap], index), native_alone[tap])]
    assert not differing, f"native sample {index} of batch {BATCH} differs from its batch-1 run at {differing}"
    failures = []
    for tap in FORWARD_TAPS:
        bound = oracle_bound(reference_alone[tap], oracle[tap])
        error = np.max(np.abs(_sample(tap, reference_batched[tap], index).astype(np.float64) - oracle[tap]))
        if error > bound.value:
            failures.append(f"{tap}: {error:.3g} > {bound.value:.3g}")
    assert not failures, f"reference sample {index} of batch {BATCH} vs its batch-1 run: {failures}"

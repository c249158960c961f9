"""Sample i of a batch-4 run must equal its batch-1 run: bit for bit on the native side (each image's work is
independent of the batch), and within the error model's per-element bounds of that image on the reference side
(oneDNN blocks differently per batch size, so the reference is not bit-exact, but any correct float32 forward of
the image is within them: docs/tolerance.md)."""

from functools import lru_cache

import numpy as np
import pytest

from models.ssd300.error_model import ErrorModel
from models.ssd300.reference.taps import FORWARD_TAPS
from models.ssd300.sides import native_forward, reference_forward, reference_model_for

from .cases import scenario_for, xdist_group

BATCH = 4
# The full SSD300 runs in the full-SSD300 xdist group, never beside another full-SSD300 case (memory).
CONFIGS = [pytest.param(name, marks=xdist_group(name, BATCH)) for name in ("default", "narrow")]


@lru_cache(maxsize=2)
def _batched(name: str):
    scenario = scenario_for(name, BATCH)
    images = scenario.images()
    return native_forward(scenario, images), reference_forward(scenario, images)


def _sample(name: str, array: np.ndarray, index: int) -> np.ndarray:
    return array if name == "priors" else array[index : index + 1]


def _single_image(name: str, index: int):
    """-> the image's native and reference float32 forward traces at batch 1 and its error model (float64 oracle)."""
    scenario = scenario_for(name, BATCH)
    image = scenario.images()[index : index + 1]
    oracle = reference_forward(scenario, image.astype(np.float64))
    error_model = ErrorModel(reference_model_for(scenario), oracle, image, scenario.targets()[index : index + 1])
    return native_forward(scenario, image), reference_forward(scenario, image), error_model


def _beyond_bounds(sample: dict, alone: dict, error_model: ErrorModel) -> list:
    """Where a float32 forward of one image is farther from the oracle than the error model allows (each tap judged
    with the sample's own upstream deviations carried in); taps the model does not bound (priors) must equal the
    batch-1 run's bit for bit."""
    failures = []
    for tap in FORWARD_TAPS:
        bound = error_model.bound(tap, sample)
        if bound is None:
            if not np.array_equal(sample[tap], alone[tap]):
                failures.append(f"{tap}: not bit-identical to the batch-1 run")
            continue
        excess = np.abs(sample[tap].astype(np.float64) - error_model.oracle[tap]) - bound
        if np.any(excess > 0):
            worst = np.unravel_index(np.argmax(excess), excess.shape)
            failures.append(f"{tap}: {int(np.sum(excess > 0))} elements beyond their bound, worst at {worst} "
                            f"by {excess[worst]:.3g} (bound {bound[worst]:.3g})")
    return failures


@pytest.mark.parametrize("scenario_name", CONFIGS)
@pytest.mark.parametrize("index", range(BATCH))
def test_sample_equals_its_batch1_run(scenario_name, index):
    native_batched, reference_batched = _batched(scenario_name)
    native_alone, reference_alone, error_model = _single_image(scenario_name, index)
    differing = [tap for tap in FORWARD_TAPS if not np.array_equal(_sample(tap, native_batched[tap], index), native_alone[tap])]
    assert not differing, f"native sample {index} of batch {BATCH} differs from its batch-1 run at {differing}"
    sample = {tap: _sample(tap, reference_batched[tap], index) for tap in FORWARD_TAPS}
    failures = _beyond_bounds(sample, reference_alone, error_model)
    assert not failures, f"reference sample {index} of batch {BATCH} vs the error model of its image: {failures}"


@pytest.mark.parametrize("tap", ["backbone.conv4_3", "conf_head"])
def test_a_sample_one_element_beyond_its_bound_fails(tap):
    """The check above can fail: the batched reference sample with one element moved twice its bound from the oracle
    (and two float32 spacings: conf_head, a join of the head levels, is bounded by their deviations alone, which can
    be below one spacing of its largest element)."""
    _, reference_batched = _batched("narrow")
    _, reference_alone, error_model = _single_image("narrow", 1)
    sample = {t: _sample(t, reference_batched[t], 1).copy() for t in FORWARD_TAPS}
    assert not _beyond_bounds(sample, reference_alone, error_model)
    element = np.unravel_index(np.argmax(np.abs(error_model.oracle[tap])), sample[tap].shape)
    bound = error_model.bound(tap, sample)[element]
    exact = error_model.oracle[tap][element]
    sample[tap][element] = np.float32(exact + 2 * bound + 2 * np.spacing(np.float32(exact)))
    assert abs(float(sample[tap][element]) - exact) > bound
    failures = _beyond_bounds(sample, reference_alone, error_model)
    assert failures and failures[0].startswith(f"{tap}: 1 elements beyond"), failures

"""Sample i of a batch-4 run must equal its batch-1 run: bit for bit on the native side (each image's work is
independent of the batch), and within the oracle bound on the reference side (oneDNN blocks differently per
batch size, so the reference is not bit-exact)."""

import numpy as np
import pytest

from reference.taps import FORWARD_TAPS

from .cases import scenario_for, traces_for
from .sides import native_forward, reference_forward
from .tolerance import oracle_bound

BATCH = 4
CONFIGS = ["default", "narrow"]


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


@pytest.mark.parametrize("index", range(BATCH))
@pytest.mark.parametrize("scenario_name", CONFIGS)
def test_native_sample_equals_its_batch1_run_bit_for_bit(scenario_name, index):
    batched = traces_for(scenario_name, BATCH).native
    alone, _, _ = _single_image_runs(scenario_name, index)
    differing = [tap for tap in FORWARD_TAPS if not np.array_equal(_sample(tap, batched[tap], index), alone[tap])]
    assert not differing, f"native sample {index} of batch {BATCH} differs from its batch-1 run at {differing}"


@pytest.mark.parametrize("index", range(BATCH))
@pytest.mark.parametrize("scenario_name", CONFIGS)
def test_reference_sample_matches_its_batch1_run_within_oracle_bound(scenario_name, index):
    batched = traces_for(scenario_name, BATCH).reference
    _, alone, oracle = _single_image_runs(scenario_name, index)
    failures = []
    for tap in FORWARD_TAPS:
        bound = oracle_bound(alone[tap], oracle[tap])
        error = np.max(np.abs(_sample(tap, batched[tap], index).astype(np.float64) - oracle[tap]))
        if error > bound.value:
            failures.append(f"{tap}: {error:.3g} > {bound.value:.3g}")
    assert not failures, f"reference sample {index} of batch {BATCH} vs its batch-1 run: {failures}"

"""The second model's sweep: ResNet-8's training step on every scenario at batch 1, 2 and 8, every tensor (forward
taps, loss, gradients, parameters, momentum and BatchNorm running buffers after the update) judged by the core
under the error model, the native float64 build held to the oracle. `pytest parity/ -k resnet`."""

import pytest

from models.resnet8.scenarios import all_scenarios
from models.resnet8.sides import run_case

from .core.explain import explain

TENSORS_PER_STEP = 175  # 26 taps, the loss, 26 tap and 33 parameter gradients, 33 + 33 + 23 after the update


@pytest.mark.parametrize("scenario", all_scenarios(), ids=lambda s: s.id)
def test_resnet8_step_matches_everywhere(scenario, record):
    results = run_case(scenario)
    for result in results:
        record(result)
    assert len(results) == TENSORS_PER_STEP, f"{len(results)} tensors compared, expected {TENSORS_PER_STEP}"
    harness = [r.name for r in results if r.harness_error]
    assert not harness, f"the reference's own float32 broke its bound (a harness error) at {harness}"
    failed = [r for r in results if not r.passed]
    assert not failed, f"{len(failed)} of {len(results)} tensors failed; first: " + explain(failed[0])

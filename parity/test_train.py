"""Training-trajectory parity in the sweep: a few steps of the full SSD300 trained on both sides from the same
weights on the same batches; every step's loss (before the update), every parameter and momentum buffer (after it)
and the validation losses must agree within the oracle bounds. Batch 1: at batch 2 the trajectory held 7.7 GB
resident alone and 12.0 GB inside make test; tests/test_train_faults.py trains the narrow config at batch 2.
`make train-parity` runs the longer narrow trajectory with the learning check."""

import numpy as np
import pytest

from .cases import FULL_SSD300_GROUP
from .explain import explain
from .train import TrainSettings, run_trajectory
from .train_report import build_train_report


@pytest.mark.xdist_group(FULL_SSD300_GROUP)
def test_full_ssd300_trains_like_the_reference_for_three_steps(record):
    report = run_trajectory(TrainSettings(config="ssd300", steps=3, batch_size=1, train_size=4, val_size=2))
    for step in report.steps:
        for result in step.results:
            record(result)
    failed = [r for step in report.steps for r in step.results if not r.passed]
    assert not failed, "\n".join(explain(r) for r in failed[:3])
    assert all(v["result"]["verdict"] == "pass" for v in report.validation)
    assert all(np.isfinite(v) for step in report.steps for v in step.train_loss.values())
    data = build_train_report(report, require_learning=False)
    assert data["passed"] and data["first_divergence"] is None
    assert len(report.steps) == 3 and sum(len(s.results) for s in report.steps) == 3 * (1 + 2 * 71)

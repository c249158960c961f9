"""Training-trajectory parity in the sweep: a few steps of the full SSD300 trained on both sides from the same
weights on the same batches; every step's trace (before the update), every parameter and momentum buffer (after it)
and the validation losses must agree within their bounds. Batch 1: at batch 2 the trajectory held 7.7 GB
resident alone and 12.0 GB inside make test; tests/test_train_faults.py trains the narrow config at batch 2.
`make train-parity` runs the longer narrow trajectory with the learning check."""

import numpy as np
import pytest

from models.ssd300.reference.configs import get_config
from models.ssd300.reference.model import build_reference
from models.ssd300.reference.step import step_order

from .cases import FULL_SSD300_GROUP
from .core.explain import explain
from .train import TrainSettings, run_trajectory
from .train_report import build_train_report


@pytest.mark.xdist_group(FULL_SSD300_GROUP)
def test_full_ssd300_trains_like_the_reference_for_two_steps(record):
    # two steps: the second carries the first's momentum buffers (the narrow trajectories run more)
    report = run_trajectory(TrainSettings(config="ssd300", steps=2, batch_size=1, train_size=4, val_size=1))
    for step in report.steps:
        for result in step.results:
            record(result)
    failed = [r for step in report.steps for r in step.results if not r.passed]
    assert not failed, "\n".join(explain(r) for r in failed[:3])
    assert all(v["verdict"] == "pass" and v["compared"] > 0 for v in report.validation)
    assert all(np.isfinite(v) for step in report.steps for v in step.train_loss.values())
    data = build_train_report(report, require_learning=False)
    assert data["passed"] and data["first_divergence"] is None
    # every step judges its whole trace, then every momentum buffer and parameter after the update
    model = build_reference(get_config("ssd300"), 0)
    judged = step_order(model) + [f"{kind}/{key}" for kind in ("momentum", "param") for key in model.state_dict()]
    assert len(report.steps) == 2 and all([r.name for r in s.results] == judged for s in report.steps)

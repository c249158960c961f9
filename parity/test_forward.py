"""Every forward tap of the native SSD300 against the reference, per scenario and batch size."""

import pytest

from .cases import case_params, isolated_for, judge, sweep_params
from .core.explain import explain


@pytest.mark.parametrize("scenario_name,batch_size,tap", sweep_params(("forward",)))
def test_forward(scenario_name, batch_size, tap, record):
    judge(scenario_name, batch_size, tap, record)


@pytest.mark.parametrize("scenario_name,batch_size", case_params())
def test_isolated_stages(scenario_name, batch_size, record):
    """Each native stage (forward, loss, backward) fed the reference's own inputs matches on its own."""
    results = isolated_for(scenario_name, batch_size)
    for result in results:
        record(result)
    failed = [r for r in results if not r.passed]
    assert not failed, "\n".join(explain(r) for r in failed)

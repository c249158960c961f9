"""Every forward tap of the native SSD300 against the reference, per scenario and batch size."""

import pytest

from .cases import CASES, case_id, results_for, tensor_names
from .explain import explain

PARAMS = [
    pytest.param(name, batch, tap, id=f"{case_id(name, batch)}-{tap}")
    for name, batch in CASES
    for tap in tensor_names()["forward"]
]


@pytest.mark.parametrize("scenario_name,batch_size,tap", PARAMS)
def test_forward(scenario_name, batch_size, tap, record):
    results = results_for(scenario_name, batch_size)
    assert tap in results, f"tap {tap!r} was not produced; produced: {sorted(results)}"
    record(results[tap])
    assert results[tap].passed, explain(results[tap])

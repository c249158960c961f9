"""Every forward tap of the native SSD300 against the reference, per config and batch size."""

import pytest

from reference.taps import FORWARD_TAPS

from .cases import FORWARD_CASES, case_id, forward_results
from .explain import explain

PARAMS = [
    pytest.param(name, batch, tap, id=f"{case_id(name, batch)}-{tap}")
    for name, batch in FORWARD_CASES
    for tap in FORWARD_TAPS
]


@pytest.mark.parametrize("scenario_name,batch_size,tap", PARAMS)
def test_forward(scenario_name, batch_size, tap, record):
    results = forward_results(scenario_name, batch_size)
    assert tap in results, f"tap {tap!r} was not produced; produced: {sorted(results)}"
    result = results[tap]
    record(result)
    assert result.passed, explain(result)


@pytest.mark.parametrize("scenario_name,batch_size", FORWARD_CASES, ids=[case_id(*c) for c in FORWARD_CASES])
def test_native_produces_exactly_the_reference_taps(scenario_name, batch_size):
    results = forward_results(scenario_name, batch_size)
    assert list(results) == FORWARD_TAPS, "native and reference must name the same taps, in execution order"
    assert len(FORWARD_TAPS) >= 40

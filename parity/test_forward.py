"""Every forward tap of the native SSD300 against the reference, per scenario and batch size."""

import pytest

from .cases import judge, sweep_params


@pytest.mark.parametrize("scenario_name,batch_size,tap", sweep_params(("forward",)))
def test_forward(scenario_name, batch_size, tap, record):
    judge(scenario_name, batch_size, tap, record)

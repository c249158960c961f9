"""ResNet-8's fault catalogue: each BatchNorm porting bug, switched on in the native module, is caught in its
scenario at the tensor where it starts, with a margin of at least 10, and never blamed on the reference."""

import pytest

from models.resnet8.faults import FAULTS, check_fault

MARGIN = 10


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_resnet8_fault_is_caught_where_it_starts(fault):
    outcome = check_fault(fault)
    assert outcome.first_divergence == fault.starts_at, (
        f"{fault.name}: first divergence at {outcome.first_divergence}, expected {fault.starts_at}")
    assert outcome.margin >= MARGIN, f"{fault.name}: margin {outcome.margin:.3g} at {fault.starts_at}, below {MARGIN}"
    assert outcome.harness_errors == 0


def test_every_native_fault_is_catalogued():
    import resnet8_native

    assert [f.name for f in FAULTS] == resnet8_native.fault_names()

"""The fault catalogue: with each known porting bug switched on in the native model, the parity run fails and
its report names the tensor where the bug starts, in propagated and in isolated mode; where the bug makes values
non-finite, the NaN/Inf sentinel names that tensor with the reference finite there."""

import pytest
import ssd_native

from models.ssd300.faults import CATALOGUE, LADDER_MARGIN, check_fault, injected


def test_catalogue_covers_every_native_fault_switch():
    assert [f.name for f in CATALOGUE] == ssd_native.fault_names()


BUGS = [f for f in CATALOGUE if not f.within_model]
WITHIN_MODEL = [f for f in CATALOGUE if f.within_model]


@pytest.mark.parametrize("fault", BUGS, ids=[f.name for f in BUGS])
def test_fault_is_detected_and_localized(fault):
    outcome = check_fault(fault)
    assert outcome.detected, f"{fault.name}: the parity run passed with the fault on"
    assert outcome.first_divergence == fault.starts_at, "propagated mode names another tensor first"
    assert outcome.first_isolated == (None if fault.trajectory else fault.starts_at), \
        "isolated mode names another stage first"
    if fault.nonfinite:
        assert outcome.first_nonfinite == fault.starts_at and outcome.reference_finite_there
    assert outcome.localized
    assert outcome.strongest_margin is None or outcome.strongest_margin >= LADDER_MARGIN, \
        f"caught with a margin of {outcome.strongest_margin:.3g} only"
    assert ssd_native.active_faults() == []


@pytest.mark.parametrize("name", ["layer_major_concat", "batch_wide_mining"])
def test_batch_faults_hide_at_batch_one(name):
    """Why the sweep runs batch sizes above one: these bugs leave a batch of one untouched."""
    fault = next(f for f in CATALOGUE if f.name == name)
    assert not check_fault(fault, batch_size=1).detected


def test_faults_are_switched_by_name_and_rejected_when_unknown():
    with injected("frozen_layer", "swapped_variances"):
        assert ssd_native.active_faults() == ["frozen_layer", "swapped_variances"]
    assert ssd_native.active_faults() == []
    with pytest.raises(ValueError, match=r"unknown fault 'softmax'; known faults: softmax_without_max, "):
        ssd_native.set_faults(["softmax"])


@pytest.mark.parametrize("fault", WITHIN_MODEL, ids=[f.name for f in WITHIN_MODEL])
def test_a_change_inside_float32s_error_model_passes_and_shows_its_margin(fault):
    outcome = check_fault(fault)
    assert not outcome.detected, f"{fault.name}: a correct float32 computation was flagged"
    assert outcome.margin is not None and 0 < outcome.margin <= 1 and outcome.reference_margin is not None

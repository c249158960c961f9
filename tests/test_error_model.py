"""The error model's bounds (models/ssd300/error_model.py, from the core's parity/core/error_model): the reference's own float32 passes every one of them, a bound it
breaks is reported as the harness's error, and a bound follows the data-flow graph: an upstream excess loosens
only the tensors computed from it."""

import math
from functools import lru_cache

import numpy as np
import pytest

from models.ssd300.error_model import LAMBDA, U, error_model_for, gamma
from models.ssd300.routing_ties import find_routing_ties
from models.ssd300.rules import RULES
from models.ssd300.sides import reference_model_for, run_sides
from parity.cases import scenario_for
from parity.core.compare import compare_traces


@lru_cache(maxsize=1)
def _traces():
    return run_sides(scenario_for("narrow", 2))


def _float_tensors(trace):
    return [n for n in trace if RULES.kind(n) not in ("index", "exact")]


def test_gamma_is_the_smaller_of_the_deterministic_and_the_probabilistic_bound():
    assert gamma(1) == pytest.approx(U / (1 - U))
    assert gamma(50) == pytest.approx(50 * U / (1 - 50 * U))  # below LAMBDA^2 terms the deterministic one is smaller
    n = 4608
    assert gamma(n) == pytest.approx(math.expm1(LAMBDA * math.sqrt(n) * U + n * U * U / (1 - U)))
    assert gamma(n) < n * U


def test_the_reference_passes_every_bound_and_its_margin_is_reported():
    t = _traces()
    results = compare_traces(RULES, "narrow-B2", 2, t.native, t.reference, t.oracle, error_model=error_model_for(t))
    judged = [r for r in results if r.bound.get("rule") == "error_model"]
    assert {r.name for r in judged} == set(_float_tensors(t.reference)) - {"priors"}
    assert not [r.name for r in judged if r.harness_error]
    assert all(0 <= r.bound["reference_margin"] <= 1 and 0 <= r.bound["native_margin"] <= 1 for r in judged)
    # The margins are not vacuous: the forward convolutions' own rounding shows (a bound that cannot be approached
    # would read 0 everywhere).
    assert max(r.bound["reference_margin"] for r in judged if r.name.startswith("backbone.conv")) > 1e-3


class _ShrunkForTheReference:
    """The scenario's error model, with the reference's bounds shrunk 1000-fold (the native's kept)."""

    def __init__(self, traces):
        self.model, self.reference = error_model_for(traces), traces.reference

    def bound(self, name, side):
        bound = self.model.bound(name, side)
        return bound * 1e-3 if side is self.reference and bound is not None else bound

    @property
    def assumed_missing(self):
        return self.model.assumed_missing


def test_a_bound_the_reference_breaks_is_a_harness_error_not_a_native_failure():
    t = _traces()
    results = {r.name: r for r in compare_traces(RULES, "narrow-B2", 2, t.native, t.reference, t.oracle,
                                                 error_model=_ShrunkForTheReference(t))}
    result = results["backbone.conv3_1"]
    assert not result.passed and result.harness_error
    assert result.mismatches == 0  # the native side is within its own bound
    assert len(result.reasons) == 1 and result.reasons[0].startswith("harness error: the reference's own float32")


def test_an_upstream_excess_loosens_only_the_tensors_computed_from_it():
    """conv4_3's native error blown up 1000-fold: the bounds of the stages that read conv4_3 grow, every other
    bound stays bit-identical (no running maximum in execution order)."""
    t = _traces()
    model = error_model_for(t)
    tap = "backbone.conv4_3"
    edited = dict(t.native)
    edited[tap] = (t.oracle[tap] + 1000 * (t.native[tap] - t.oracle[tap])).astype(np.float32)
    readers = {"backbone.pool4", "backbone.conv4_3_l2norm", "grad/backbone.conv4_3", "param_grad/backbone.scale_weight",
               "param_grad/backbone.features.21.weight", "param_grad/backbone.features.21.bias"}
    changed = {name for name in _float_tensors(t.native) if name != "priors"
               and not np.array_equal(model.bound(name, t.native), model.bound(name, edited))}
    assert {"backbone.pool4", "backbone.conv4_3_l2norm"} <= changed <= readers
    results = {r.name: r for r in compare_traces(RULES, "narrow-B2", 2, edited, t.reference, t.oracle, error_model=model)}
    assert not results[tap].passed
    assert [name for name, r in results.items() if not r.passed] == [tap]


def test_a_tensor_off_by_its_inputs_deviation_alone_still_passes_and_one_beyond_fails():
    """The data-following part: pool1 is an exact max of conv1_2, so its bound is conv1_2's deviation carried
    through the window; a pool output moved past it fails there."""
    t = _traces()
    model = error_model_for(t)
    bound = model.bound("backbone.pool1", t.native)
    error = np.abs(t.native["backbone.pool1"].astype(np.float64) - t.oracle["backbone.pool1"])
    assert (error <= bound).all() and (error > 0).any()
    edited = dict(t.native)
    edited["backbone.pool1"] = t.native["backbone.pool1"].copy()
    index = np.unravel_index(int(np.argmax(bound)), bound.shape)
    edited["backbone.pool1"][index] = np.float32(t.oracle["backbone.pool1"][index] + 3 * bound[index])
    result = next(r for r in compare_traces(RULES, "narrow-B2", 2, edited, t.reference, t.oracle, error_model=model)
                  if r.name == "backbone.pool1")
    assert not result.passed and result.mismatches == 1 and result.worst[0]["index"] == list(map(int, index))


def _window(t, native):
    from models.ssd300.error_model import ErrorModel

    model = ErrorModel(reference_model_for(t.scenario), t.oracle, t.scenario.images(), t.scenario.targets())
    return lambda tap: np.maximum(model.bound(tap, native), model.bound(tap, t.reference))


def test_a_pool_choice_that_is_not_a_near_tie_is_never_replayed():
    """The native side made to pick pool1's runner-up in a window whose top two are far apart in the oracle: the
    tie finder leaves it alone (so the gradient it routes there fails), while the window search still runs."""
    t = _traces()
    x = t.oracle["backbone.conv1_2"][0, 0, :2, :2]  # pool1's window (0, 0, 0, 0)
    order = np.argsort(x.ravel())[::-1]
    assert x.ravel()[order[0]] - x.ravel()[order[1]] > 1e-3  # far beyond any float32 rounding at this size
    native = dict(t.native)
    native["backbone.conv1_2"] = t.native["backbone.conv1_2"].copy()
    runner_up = np.unravel_index(order[1], (2, 2))
    native["backbone.conv1_2"][0, 0, runner_up[0], runner_up[1]] = x.max() + 1.0
    found = find_routing_ties(reference_model_for(t.scenario), native, t.reference, t.oracle, window=_window(t, native))
    entry = found.get("backbone.pool1")
    assert entry is None or not bool(entry[2][0, 0, 0, 0])


def test_a_relu_sign_flip_that_is_not_a_near_tie_is_never_replayed():
    t = _traces()
    tap = "backbone.conv2_1"
    blocked = np.argwhere(t.reference[tap][0, 0] == 0)[0]  # an element the ReLU blocks in the reference
    native = dict(t.native)
    native[tap] = t.native[tap].copy()
    native[tap][0, 0, blocked[0], blocked[1]] = 1.0  # the native lets a clearly negative input through
    found = find_routing_ties(reference_model_for(t.scenario), native, t.reference, t.oracle, window=_window(t, native))
    entry = found.get(tap)
    assert entry is None or not bool((entry[1] | entry[2])[0, 0, blocked[0], blocked[1]])


@pytest.mark.parametrize("scenario", ["narrow", "border_tiny_shared", "many_boxes", "empty_image"])
def test_a_doubled_loss_target_or_loss_gradient_fails_in_every_scenario(scenario):
    """With the oracle matching as the float32 sides do at its near-ties, the loss stages' bounds stay tight: twice
    the right value fails at the tensor doubled, in scenarios with priors at the IoU threshold too."""
    t = run_sides(scenario_for(scenario, 2))
    model = error_model_for(t)
    for name in ("loss.loc", "targets.loc", "grad/loc_head"):
        edited = dict(t.native)
        edited[name] = (2 * t.native[name]).astype(np.float32)
        results = {r.name: r for r in compare_traces(RULES, f"{scenario}-B2", 2, edited, t.reference, t.oracle,
                                                     error_model=model)}
        assert not results[name].passed, (name, results[name].bound)
        assert results[name].mismatches > 0 and not results[name].harness_error

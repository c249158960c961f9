"""A native training step that takes another run's near-tie decisions (forward_backward's `routing`): the float64
native step routed as the float64 reference is routed must agree with it at the strict float64 bound, tensor by
tensor, and differ from it where unrouted (so the routing is what makes them agree)."""

from functools import lru_cache

import numpy as np
import pytest
import torch

from models.ssd300.reference.routing import POOL_INPUTS, window_argmax
from models.ssd300.reference.taps import module_taps
from models.ssd300.routing_ties import native_step_routing, same_routing
from models.ssd300.sides import (
    native64_routing,
    native_model_for,
    native_step,
    pending_reference_step,
    reference_model_for,
    run_sides,
)
from parity.cases import scenario_for
from parity.core.tolerance import strict64_bound


def _artificial_routing(model, trace: dict, seed: int = 0) -> dict:
    """Decisions that differ from the run's own: a fifth of the pool windows send their gradient to the window's
    smallest element, a few ReLUs pass where the output is zero or block where it is positive, and a few priors
    swap their hard-negative choice."""
    rng = np.random.default_rng(seed)
    modules = {tap: module for module, tap in module_taps(model).items()}
    mask = lambda shape, share: torch.from_numpy(rng.random(shape) < share)
    routing = {}
    for tap, input_tap in POOL_INPUTS.items():
        with torch.no_grad():
            smallest = window_argmax(modules[tap], -torch.from_numpy(trace[input_tap]))
        routing[tap] = ("pool", smallest, mask(smallest.shape, 0.2))
    for tap in ("backbone.conv3_3", "backbone.conv6", "extras.conv8_1"):
        on = torch.from_numpy(trace[tap] > 0)
        routing[tap] = ("relu", mask(on.shape, 0.05) & ~on, mask(on.shape, 0.05) & on)
    negatives = torch.from_numpy(trace["mining.negatives"])
    background = torch.from_numpy(trace["match.labels"] == 0)
    routing["mining.negatives"] = ("mining", ~negatives, mask(negatives.shape, 0.01) & background)
    return routing


@lru_cache(maxsize=1)
def _routed_steps():
    scenario = scenario_for("narrow", 2)
    images, targets = scenario.images().astype(np.float64), scenario.targets()
    oracle = pending_reference_step(scenario, images, targets)
    routing = _artificial_routing(reference_model_for(scenario, np.float64), oracle.forward_trace())
    routed_oracle = {name: t.numpy() for name, t in oracle.backward(routing).items()}
    native = native_step(scenario, images, targets)
    routed_native = native_step(scenario, images, targets, routing)
    return native, routed_native, routed_oracle


def _strict_failures(native: dict, oracle: dict) -> list:
    failed = []
    for name, expected in oracle.items():
        if expected.dtype == np.float64:
            if np.abs(native[name] - expected).max(initial=0.0) > strict64_bound(expected).value:
                failed.append(name)
        elif not np.array_equal(native[name], expected):
            failed.append(name)
    return failed


def test_a_routed_native_step_agrees_with_the_reference_routed_the_same_way():
    _, routed_native, routed_oracle = _routed_steps()
    assert routed_native.keys() == routed_oracle.keys()
    assert _strict_failures(routed_native, routed_oracle) == []


def test_the_unrouted_native_step_fails_there():
    """Where the routing sends gradients: the loss (mining), every pool's input gradient, the routed ReLUs'."""
    native, _, routed_oracle = _routed_steps()
    failed = _strict_failures(native, routed_oracle)
    for name in ("mining.negatives", "loss.total", "grad/backbone.conv1_2", "grad/backbone.conv5_3",
                 "grad/backbone.conv3_2", "grad/extras.conv8_1"):
        assert name in failed, name


def test_an_empty_routing_changes_nothing():
    scenario = scenario_for("narrow", 1)
    images, targets = scenario.images().astype(np.float64), scenario.targets()
    plain, routed = native_step(scenario, images, targets), native_step(scenario, images, targets, {})
    assert all(np.array_equal(plain[name], routed[name]) for name in plain)


def _routing_for_batch(batch: int) -> dict:
    scenario = scenario_for("narrow", batch)
    trace = native_step(scenario, scenario.images().astype(np.float64), scenario.targets())
    return native_step_routing(_artificial_routing(reference_model_for(scenario, np.float64), trace))


@pytest.mark.parametrize(
    "change,error,message",
    [
        (lambda r: r.update({"backbone.conv1_1": ("pool",) + r["backbone.pool1"][1:]}), ValueError,
         r"routing names 'backbone.conv1_1' as a pool, which is not a max-pool's output"),
        (lambda r: r.update({"backbone.pool1": ("relu",) + r["backbone.conv6"][1:]}), ValueError,
         r"routing names 'backbone.pool1' as a ReLU, which is not a ReLU's output"),
        (lambda r: r.update({"head.loc.0": ("relu",) + r["backbone.conv6"][1:]}), ValueError,
         r"routing names 'head.loc.0' as a ReLU"),
        (lambda r: r.update({"match.matched_idx": ("match", np.zeros((1, 8732), np.int64), np.zeros((1, 8732), np.uint8))}),
         ValueError, r"routing\['match.matched_idx'\] has kind 'match': a native step follows 'pool' and 'relu'"),
        (lambda r: r.update({"backbone.pool2": ("pool", r["backbone.pool2"][1][:, :1].copy(), r["backbone.pool2"][2])}),
         ValueError, r"routing\['backbone.pool2'\] choice has shape \(1, 1, 75, 75\), expected \(1, \d+, 75, 75\)"),
        (lambda r: r["backbone.pool3"][1].__setitem__((0, 0, 0, 0), 10**6) or r["backbone.pool3"][2].fill(1), ValueError,
         r"routing\['backbone.pool3'\] choice holds 1000000, outside the 75x75 plane"),
        (lambda r: r.update({"backbone.conv6": ("relu", r["backbone.conv6"][1].astype(bool), r["backbone.conv6"][2])}),
         TypeError, r"routing\['backbone.conv6'\] force_pass' has dtype bool, expected uint8"),
        (lambda r: r.update({"mining.negatives": ("mining", r["mining.negatives"][1][:, :5].copy(), r["mining.negatives"][2])}),
         ValueError, r"routing\['mining.negatives'\] negatives has shape \(1, 5\), expected \(1, 8732\)"),
        (lambda r: r.update({"backbone.pool4": ["pool", None, None]}), TypeError,
         r"routing\['backbone.pool4'\] must be a tuple \(kind, array, array\)"),
    ],
    ids=["pool-not-a-pool", "relu-not-a-relu", "relu-head-conv", "match", "pool-shape", "pool-index", "mask-dtype",
         "mining-shape", "not-a-tuple"],
)
def test_a_bad_routing_is_rejected_before_the_step(change, error, message):
    scenario = scenario_for("narrow", 1)
    images, targets = scenario.images().astype(np.float64), scenario.targets()
    routing = _routing_for_batch(1)
    change(routing)
    model = native_model_for(scenario, np.float64)
    boxes, labels = [b.astype(np.float64) for b, _ in targets], [l for _, l in targets]
    with pytest.raises(error, match=message):
        model.forward_backward(images, boxes, labels, routing)
    with pytest.raises(TypeError, match=r"'routing' must be a dict"):
        model.forward_backward(images, boxes, labels, [])


@lru_cache(maxsize=1)
def _native64_case():
    """narrow-B1's native32 routing (found as run_sides finds it), the float64 native step under it and the oracle."""
    scenario = scenario_for("narrow", 1)
    images, targets = scenario.images(), scenario.targets()
    traces = run_sides(scenario)
    routing = {tap: entry for tap, entry in traces.routing.items() if entry[0] != "match"}
    assert routing, "narrow-B1 has near-ties in its pools"
    oracle = pending_reference_step(scenario, images.astype(np.float64), targets)
    native64 = native_step(scenario, images.astype(np.float64), targets, routing)
    return scenario, routing, native64, oracle.forward_trace(routing)


def _pool1_window_made_close(native64, oracle_trace, gap):
    """A pool1 window whose first element, a positive one, wins in the oracle: its second element set a relative
    `gap` below the first in the oracle and as far above it in native64 -> (the two traces, where, native64's pick)."""
    def windows(trace):
        tap = trace["backbone.conv1_2"].copy()
        return tap, tap[0].reshape(tap.shape[1], tap.shape[2] // 2, 2, -1, 2).transpose(0, 1, 3, 2, 4)

    native_input, native_windows = windows(native64)
    oracle_input, oracle_windows = windows(oracle_trace)
    first = (oracle_windows.reshape(*oracle_windows.shape[:3], 4).argmax(-1) == 0) & (oracle_windows[..., 0, 0] > 0)
    channel, row, col = np.argwhere(first)[0]
    oracle_windows[channel, row, col, 0, 1] = oracle_windows[channel, row, col, 0, 0] * (1 - gap)
    native_windows[channel, row, col, 0, 1] = native_windows[channel, row, col, 0, 0] * (1 + gap)
    return (dict(native64, **{"backbone.conv1_2": native_input}), dict(oracle_trace, **{"backbone.conv1_2": oracle_input}),
            (channel, row, col), 2 * row * native_input.shape[3] + 2 * col + 1)


def _search(scenario, routing, native64, oracle_trace):
    """run_sides' tie search for the routed float64 step, on these traces."""
    return native64_routing(reference_model_for(scenario), native64, routing, lambda r: oracle_trace,
                            scenario.images(), scenario.targets())


def test_native64_ties_of_its_own_are_routed_on_top_of_native32s():
    """None of its own on a clean run (one oracle backward serves both native builds); a window where native64
    alone took an element within float64's rounding of the oracle's maximum is added to native32's routing."""
    scenario, routing, native64, oracle_trace = _native64_case()
    assert same_routing(_search(scenario, routing, native64, oracle_trace), routing)
    native, oracle, (channel, row, col), pick = _pool1_window_made_close(native64, oracle_trace, 1e-15)
    found = _search(scenario, routing, native, oracle)
    assert set(found) == set(routing) | {"backbone.pool1"}
    _, choice, mask = found["backbone.pool1"]
    assert int(mask.sum()) == 1 + (int(routing["backbone.pool1"][2].sum()) if "backbone.pool1" in routing else 0)
    assert mask[0, channel, row, col] and choice[0, channel, row, col] == pick


def test_a_native64_pool_choice_beyond_float64_rounding_is_never_replayed():
    """The same window, its two elements 1e-9 apart: far beyond float64's rounding (though within float32's), so
    native64's other choice is not a near-tie and is left to fail."""
    scenario, routing, native64, oracle_trace = _native64_case()
    native, oracle, (channel, row, col), _ = _pool1_window_made_close(native64, oracle_trace, 1e-9)
    found = _search(scenario, routing, native, oracle)
    assert "backbone.pool1" not in found or not found["backbone.pool1"][2][0, channel, row, col]

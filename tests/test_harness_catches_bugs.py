"""The checker is trusted only after it has been seen to fail: each test injects a bug and asserts that the
comparison fails at the right tensor (and passes where the bug is invisible)."""

from functools import lru_cache

import numpy as np
import pytest
import ssd_native

from models.ssd300.error_model import error_model_for
from models.ssd300.isolated import isolated_results
from models.ssd300.layout import SOURCE_OFFSETS
from models.ssd300.reference.configs import ANCHORS_PER_LOCATION, NUM_PRIORS, SOURCE_SIZES
from models.ssd300.reference.taps import FORWARD_TAPS
from models.ssd300.rules import RULES
from models.ssd300.sides import run_sides
from parity.cases import scenario_for
from parity.core.compare import compare_traces
from parity.core.report import build_report


@lru_cache(maxsize=None)
def traces_for(_name: str, batch_size: int):
    """Forward-only traces of the narrow scenario (the whole step at batch 2, for the gradient tests)."""
    return run_sides(scenario_for("narrow", batch_size), step=batch_size == 2)


def _compare(native: dict, batch_size: int = 2):
    """An edited native trace against the reference, under the error model's bounds of the scenario."""
    t = traces_for("narrow", batch_size)
    return compare_traces(RULES, f"narrow-B{batch_size}", batch_size, native, t.reference, t.oracle,
                          error_model=error_model_for(t))


def _first_failure(results):
    failed = [r for r in results if not r.passed]
    return failed[0].name if failed else None


def _native_copy(batch_size: int = 2) -> dict:
    return {k: v.copy() for k, v in traces_for("narrow", batch_size).native.items()}


def test_clean_native_trace_passes():
    t = traces_for("narrow", 2)
    results = compare_traces(RULES, "narrow-B2", 2, t.native, t.reference, t.oracle, t.native64, t.strict_oracle, t.routing_ties,
                             error_model_for(t))
    assert len(results) == 166 and all(r.passed for r in results), [r.name for r in results if not r.passed]


def test_one_perturbed_parameter_gradient_is_named():
    native = _native_copy()
    key = "param_grad/backbone.extra.1.2.weight"  # conv8_2's weight gradient
    native[key] = native[key].copy()
    native[key][7, 3, 1, 1] *= 1.01
    failed = [r.name for r in _compare(native) if not r.passed]
    assert failed == [key]


def test_gradient_written_to_the_wrong_buffer_is_caught():
    """Porting bug 2: the loss gradient stays zero; outputs alone look fine."""
    native = _native_copy()
    native["grad/conf_head"] = np.zeros_like(native["grad/conf_head"])
    results = _compare(native)
    assert all(r.passed for r in results if not r.name.startswith(("grad/", "param_grad/")))
    assert next(r for r in results if not r.passed).name == "grad/conf_head"


def test_negatives_ranked_across_the_batch_are_caught():
    """Porting bug 4: ranking negatives over the whole batch instead of per image picks other priors."""
    t = traces_for("narrow", 2)
    native = _native_copy()
    losses = np.where(t.reference["match.labels"] > 0, -np.inf, t.reference["loss.cls_per_prior"])
    count = int(native["mining.negatives"].sum())
    flat = np.zeros(losses.size, bool)
    flat[np.argsort(-losses.ravel(), kind="stable")[:count]] = True
    native["mining.negatives"] = flat.reshape(losses.shape)
    result = next(r for r in _compare(native) if r.name == "mining.negatives")
    assert not result.passed and result.mismatches > 100
    assert any("away from the selection boundary" in reason for reason in result.reasons)


def test_wrong_bias_channel_in_one_layer_is_localized_to_that_layer(narrow_weights):
    weights = {k: v.copy() for k, v in narrow_weights.items()}
    weights["backbone.extra.1.0.bias"] = np.roll(weights["backbone.extra.1.0.bias"], 1)  # conv8_1's bias, shifted
    model = ssd_native.ModelFloat32(weights)
    native = model.forward(scenario_for("narrow", 2).images())
    results = _compare(native)
    assert _first_failure(results) == "extras.conv8_1"
    upstream = FORWARD_TAPS[: FORWARD_TAPS.index("extras.conv8_1")]
    assert all(r.passed for r in results if r.name in upstream)
    # Isolated: fed the reference's inputs, only the broken stage fails.
    isolated = isolated_results(traces_for("narrow", 2), model)
    assert [r.name for r in isolated if not r.passed] == ["extras.conv8_1"]
    # Every stage after it computes correctly from what it was given: under the error model's data-following bounds
    # the error it carries downstream is allowed there, so the forward fails at conv8_1 alone.
    assert [r.name for r in results if r.name in FORWARD_TAPS and not r.passed] == ["extras.conv8_1"]


def _layer_major_concat(head: np.ndarray) -> np.ndarray:
    """Porting bug 3: each source's outputs written as one (batch x boxes) block instead of per image."""
    batch, _, depth = head.shape
    blocks = []
    for k, offset in enumerate(SOURCE_OFFSETS):
        count = SOURCE_SIZES[k] ** 2 * ANCHORS_PER_LOCATION[k]
        blocks.append(head[:, offset : offset + count].reshape(-1, depth))
    return np.concatenate(blocks).reshape(batch, NUM_PRIORS, depth)


@pytest.mark.parametrize("batch_size,caught", [(1, False), (2, True)])
def test_layer_major_concatenation_is_caught_only_with_batch_above_one(batch_size, caught):
    native = _native_copy(batch_size)
    native["conf_head"] = _layer_major_concat(native["conf_head"])
    results = _compare(native, batch_size)
    assert _first_failure(results) == ("conf_head" if caught else None)


def test_nan_in_one_tap_is_named():
    native = _native_copy()
    native["backbone.conv5_1"][1, 3, 4, 5] = np.nan
    results = _compare(native)
    failed = next(r for r in results if not r.passed)
    assert failed.name == "backbone.conv5_1"
    assert failed.nonfinite["native"]["nan"] == 1 and failed.nonfinite["reference"]["nan"] == 0
    assert any("non-finite" in reason for reason in failed.reasons)


def test_nonfinite_sentinel_names_the_first_tensor_per_side_and_phase():
    native = _native_copy()
    native["backbone.conv5_1"][0, 0, 0, 0] = np.inf
    native["grad/backbone.conv4_2"][1, 2, 3, 4] = np.nan
    sentinel = build_report(_compare(native))["runs"][0]["nonfinite"]
    assert sentinel["native"]["forward"]["name"] == "backbone.conv5_1"
    assert sentinel["native"]["forward"]["counts"] == {"nan": 0, "posinf": 1, "neginf": 0}
    assert sentinel["native"]["forward"]["other_side_finite"] is True
    assert sentinel["native"]["backward"]["name"] == "grad/backbone.conv4_2"
    assert sentinel["reference"] == {"forward": None, "backward": None}


def test_perturbation_below_the_bound_passes_and_above_it_fails():
    """One element of a weight gradient (which no other tensor is computed from) moved off the oracle by a
    fraction or a multiple of its own bound."""
    t = traces_for("narrow", 2)
    name, index = "param_grad/backbone.extra.1.2.weight", (7, 3, 1, 1)
    bound = error_model_for(t).bound(name, t.native)[index]
    for factor, should_pass in ((0.5, True), (2.0, False)):
        native = _native_copy()
        native[name][index] = np.float32(t.oracle[name][index] + factor * bound)
        result = next(r for r in _compare(native) if r.name == name)
        assert result.passed == should_pass, result.reasons
        if not should_pass:
            assert result.mismatches == 1
            assert result.worst[0]["index"] == list(index) and 1.5 < result.worst[0]["margin"] < 2.5


def test_priors_must_be_bit_identical():
    native = _native_copy()
    native["priors"][7996, 2] = np.nextafter(native["priors"][7996, 2], np.float32(np.inf))
    result = next(r for r in _compare(native) if r.name == "priors")
    assert not result.passed and result.mismatches == 1


def test_missing_and_extra_taps_fail_by_name():
    native = _native_copy(1)
    del native["head.loc.3"]
    native["head.loc.9"] = np.zeros(1, np.float32)
    failed = {r.name: r.reasons for r in _compare(native, 1) if not r.passed}
    assert set(failed) == {"head.loc.3", "head.loc.9"}
    assert "missing on the native side" in failed["head.loc.3"][0]
    assert "missing on the reference" in failed["head.loc.9"][0]


def test_shape_mismatch_fails():
    native = _native_copy()
    native["loc_head"] = native["loc_head"][:, :-1]
    result = next(r for r in _compare(native) if r.name == "loc_head")
    assert not result.passed and "shape (2, 8731, 4) on the native side" in result.reasons[0]


def test_report_of_zero_compared_tensors_fails():
    assert build_report([])["passed"] is False


def test_report_names_first_divergence_in_execution_order():
    native = _native_copy()
    native["head.conf.2"] += 1.0
    native["backbone.conv3_1"] *= 1.01
    report = build_report(_compare(native))
    assert report["passed"] is False
    assert report["runs"][0]["first_divergence"]["name"] == "backbone.conv3_1"


def test_wrong_weight_in_one_layer_is_localized_forward_and_backward(narrow_weights):
    """A conv's weight enters its forward and the gradient it sends upstream, not its own parameter gradients:
    isolated replay names exactly those two stages."""
    weights = {k: v.copy() for k, v in narrow_weights.items()}
    key = "backbone.extra.1.0.weight"  # conv8_1, reading conv7
    weights[key][[0, 1]] = weights[key][[1, 0]]  # two output channels swapped
    isolated = isolated_results(traces_for("narrow", 2), ssd_native.ModelFloat32(weights))
    assert [r.name for r in isolated if not r.passed] == ["extras.conv8_1", "grad/backbone.conv7"]


class _RaisingStage:
    """The native model, except that one isolated stage raises (a port whose mining reads a tensor it lacks)."""

    def __init__(self, model, stage):
        self.model, self.stage = model, stage

    def isolated(self, stage, *args):
        if stage == self.stage:
            raise ValueError(f"isolated stage {stage!r} needs 'loss.extra', which was not given")
        return self.model.isolated(stage, *args)

    def isolated_backward(self, *args):
        return self.model.isolated_backward(*args)


def test_an_isolated_stage_that_raises_fails_there_with_its_message_and_the_rest_is_judged(narrow_weights):
    model = _RaisingStage(ssd_native.ModelFloat32(narrow_weights), "mining.negatives")
    isolated = isolated_results(traces_for("narrow", 2), model)
    failed = [r for r in isolated if not r.passed]
    assert [r.name for r in failed] == ["mining.negatives"]
    assert "raised ValueError" in failed[0].reasons[0] and "loss.extra" in failed[0].reasons[0]
    assert len(isolated) == 166
    assert build_report(isolated)["runs"][0]["isolated"]["failed"] == 1


class _WrongWindow:
    """The native model, except that its isolated backward routes one pool1 window's gradient to the window's
    runner-up, as a port whose max-pool argmax is wrong would: a window whose top two are far apart (no near-tie)."""

    def __init__(self, model, window, choice):
        self.model, self.window, self.choice = model, window, choice

    def isolated(self, *args):
        return self.model.isolated(*args)

    def isolated_backward(self, state, grads, tied_windows, relu_pass):
        given = dict(tied_windows)
        argmax = np.full(np.shape(state["backbone.pool1"]), -1, dtype=np.int64)
        argmax[self.window] = self.choice
        given["backbone.pool1"] = argmax
        return self.model.isolated_backward(state, grads, given, relu_pass)


def test_a_wrong_argmax_at_a_window_that_is_no_tie_fails_in_isolation_where_it_routes(narrow_weights):
    traces = traces_for("narrow", 2)
    x = traces.reference["backbone.conv1_2"]
    grad = traces.reference["grad/backbone.pool1"]
    # A window with a clear maximum, whose gradient is not zero: its runner-up takes what the maximum should.
    b, c, h, w = x.shape
    windows = x.reshape(b, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(b, c, h // 2, w // 2, 4)
    top = np.sort(windows, axis=-1)
    clear = (top[..., 3] - top[..., 2] > 1e-2) & (np.abs(grad) > 1e-6)
    window = tuple(int(i) for i in np.argwhere(clear)[0])
    order = np.argsort(windows[window])[::-1]
    dy, dx = divmod(int(order[1]), 2)
    choice = (2 * window[2] + dy) * w + 2 * window[3] + dx
    isolated = isolated_results(traces, _WrongWindow(ssd_native.ModelFloat32(narrow_weights), window, choice))
    assert [r.name for r in isolated if not r.passed] == ["grad/backbone.conv1_2"]

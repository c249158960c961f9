"""The fault catalogue: each known porting bug (the project's bug list) as a native fault switch, the scenario that
provokes it, the tensor where it starts, and what a person sees in the report. `check_fault` runs the parity
sweep with one fault on and says whether the harness detected it and localized it to that tensor."""

import math
from contextlib import contextmanager
from dataclasses import dataclass

import ssd_native

from parity.core.report import build_report
from parity.train import TrainSettings, run_trajectory
from parity.train_report import build_train_report

from .case import run_case
from .scenarios import load_scenarios


@dataclass(frozen=True)
class Fault:
    name: str  # the native switch (ssd_native.fault_names())
    does: str  # what the bug does
    scenario: str  # the fixture that provokes it
    batch_size: int
    starts_at: str  # the tensor where it starts: the first divergence, propagated and isolated
    sees: str  # what a person sees in the report
    nonfinite: str | None = None  # "forward" / "backward": the native side turns non-finite first at starts_at
    # A change that stays inside float32's error model (another summation order): it must pass, and the report
    # shows how much less accurate than the reference it is at starts_at.
    within_model: bool = False
    # A bug of the optimizer: it shows only in a training trajectory (python -m parity train, TRAJECTORY settings),
    # whose first divergence is then the step and tensor where it starts ("step N: name"); no isolated replay.
    trajectory: bool = False


CATALOGUE = [
    Fault("softmax_without_max", "cross-entropy sums exp(logit) without subtracting the row maximum",
          "large_logits", 2, "loss.cls_per_prior",
          "loss.cls_per_prior is +inf where a logit exceeds ~88; the sentinel names it (reference finite)", "forward"),
    Fault("grad_into_output_buffer", "the class-loss gradient is written into (a copy of) the output buffer",
          "narrow", 2, "grad/conf_head", "every forward and loss tensor passes; grad/conf_head is all zeros"),
    Fault("layer_major_concat", "head outputs joined per source map as (batch x boxes) blocks, not per image",
          "narrow", 2, "loc_head", "loc_head and conf_head rows belong to other images/priors; passes at batch 1"),
    Fault("batch_wide_mining", "hard negatives ranked over the whole batch instead of per image",
          "narrow", 2, "mining.negatives", "mining.negatives differs away from the selection boundary; batch 1 passes"),
    Fault("l2norm_without_eps", "L2Norm divides by ||x|| without the eps clamp",
          "zero_image", 2, "backbone.conv4_3_l2norm", "NaN at the all-zero pixels of conv4_3_l2norm, named by the sentinel",
          "forward"),
    Fault("sqrt_backward_without_eps", "L2Norm backward divides by ||x|| without autograd's zero-norm guards",
          "zero_image", 2, "grad/backbone.conv4_3", "forward passes; grad/backbone.conv4_3 is NaN at all-zero pixels",
          "backward"),
    Fault("frozen_layer", "conv8_2's parameter gradients are never accumulated (a layer that never learns)",
          "narrow", 2, "param_grad/backbone.extra.1.2.weight",
          "every activation gradient passes; conv8_2's weight and bias gradients are zero"),
    Fault("grads_not_zeroed", "parameter gradients are not zeroed between steps",
          "two_steps", 2, "param_grad/head.classification_head.module_list.5.weight",
          "the second step's parameter gradients are twice the reference's, from the first in backward order"),
    Fault("aspect_ratio_order", "the two boxes of each aspect ratio are emitted in the wrong order at every location",
          "narrow", 2, "priors", "priors differ (they must be bit-identical), then matching and targets"),
    Fault("shared_prior_wrong_order", "forced best-prior matches applied in reverse: the earlier of two GTs wins",
          "border_tiny_shared", 2, "match.matched_idx", "match.matched_idx differs at the shared best prior"),
    Fault("negatives_off_by_one", "one hard negative too many per image",
          "narrow", 2, "mining.negatives", "mining.negatives has one extra index per image"),
    Fault("swapped_variances", "box encoding with 0.2 for centres and 0.1 for sizes (weights 5, 5, 10, 10)",
          "narrow", 2, "targets.loc", "targets.loc differs at every matched prior; matching passes"),
    # The sensitivity ladder: subtle bugs real ports have had; the convolution ones on conv2_1.
    Fault("conv_last_term_dropped", "conv2_1's accumulation stops one term short (its last channel's last tap)",
          "narrow", 2, "backbone.conv2_1", "conv2_1 differs by one product per output; everything before passes"),
    Fault("bf16_weights", "conv2_1's weights rounded to bfloat16 on a fast path",
          "narrow", 2, "backbone.conv2_1", "conv2_1 is off by about 1e-3 of its terms' magnitude"),
    Fault("bf16_saved_activations", "conv2_1's input saved in bfloat16 for its backward",
          "narrow", 2, "param_grad/backbone.features.5.weight", "the forward and every activation gradient pass; "
          "conv2_1's weight gradient is off by about 1e-3 of its terms' magnitude"),
    Fault("bias_channel_off", "conv2_1's bias of output channel 0 off by a relative 1e-3",
          "narrow", 2, "backbone.conv2_1", "a change of 5e-5 in one channel, below float32's error at that layer"),
    Fault("bias_added_twice", "conv2_1's bias added twice",
          "narrow", 2, "backbone.conv2_1", "every channel of conv2_1 off by its bias"),
    Fault("l2norm_eps_inside_sqrt", "L2Norm as x / sqrt(||x||^2 + eps) instead of x / max(||x||, eps)",
          "zero_image", 2, "grad/backbone.conv4_3",
          "forward identical; at all-zero pixels the gradient is s g / 1e-6 instead of s g / 1e-12"),
    Fault("first_image_normalizer", "the loss normalised by the first image's positives instead of the batch's",
          "narrow", 2, "loss.loc", "loss.loc and loss.conf scaled by the ratio of positives; batch 1 passes"),
    Fault("approximate_exp", "a fast exp good to 13 bits (relative error up to 1.2e-4) in the softmax",
          "narrow", 2, "loss.cls_per_prior", "the per-prior class losses off by about 1e-4"),
    Fault("right_padding_off_by_one", "conv2_1's right-border padding starts a column early (its last input column "
          "reads 0)", "narrow", 2, "backbone.conv2_1", "conv2_1 differs in its last two output columns only"),
    Fault("nesterov_momentum", "the SGD update takes Nesterov momentum where the reference has plain momentum",
          "training", 2, "step 1: param/backbone.features.0.weight",
          "momentum buffers pass; every parameter after the first update is off by 0.9 lr times its gradient",
          trajectory=True),
    Fault("loss_sum_float_in_order", "the loss sums accumulated in float, in prior order (not pairwise or in double)",
          "narrow", 2, "loss.conf", "passes: inside float32's error model; the report shows its margin against the "
          "reference's", within_model=True),
    Fault("iou_threshold_strict", "a prior matched at IoU > 0.5 instead of >= 0.5",
          "decision_boundaries", 2, "match.matched_idx", "the prior at IoU exactly 0.5 stays background"),
    Fault("gt_tie_last_wins", "a prior with two ground truths of equal IoU takes the last instead of the first",
          "decision_boundaries", 2, "match.matched_idx", "the prior between the two equal boxes goes to the second"),
]


@contextmanager
def injected(*names: str):
    """The named native faults switched on for the block, and all of them off afterwards."""
    ssd_native.set_faults(list(names))
    try:
        yield
    finally:
        ssd_native.set_faults([])


@dataclass
class FaultOutcome:
    fault: Fault
    detected: bool  # the run failed
    first_divergence: str | None  # propagated mode
    first_isolated: str | None  # isolated mode
    first_nonfinite: str | None  # the sentinel: native side, the fault's phase
    reference_finite_there: bool
    margin: float | None = None  # at starts_at, propagated: the native's largest error / bound (None: exact tensor)
    reference_margin: float | None = None
    # At starts_at, the native float64 build's largest error / its strict bound: the same code and fault in double,
    # where rounding is 1e-16, so what it shows is the change of mathematics alone.
    float64_margin: float | None = None
    # At starts_at, isolated, where it is a convolution or its gradients: the native's root mean square error
    # over the typical float32 rounding error, against its limit, the tensor's or its worst channel's, whichever is
    # further past (parity/core/error_model/typical.py); > 1 fails.
    typical_margin: float | None = None
    # At starts_at, isolated, where it is a convolution: the native's largest difference on the exact probe
    # (parity/core/error_model/probe.py), in units of one rounding of its terms, u (|b| + |a*w|); a correct side
    # reads 0.
    probe_margin: float | None = None

    @property
    def strongest_margin(self) -> float | None:
        """How far past its bound the fault goes where it starts, in whichever check shows it most (None: an exact
        tensor, which any change fails). A non-finite value where the reference is finite is past every bound: the
        margins above count such elements as 0 and leave them to the sentinel, so they read about 1 there."""
        if self.fault.nonfinite and self.first_nonfinite == self.fault.starts_at and self.reference_finite_there:
            return math.inf
        margins = [m for m in (self.margin, self.float64_margin, self.typical_margin, self.probe_margin)
                   if m is not None]
        return max(margins) if margins else None

    @property
    def localized(self) -> bool:
        expected = self.fault.starts_at
        isolated = None if self.fault.trajectory else expected  # a trajectory has no isolated replay
        ok = self.first_divergence == expected and self.first_isolated == isolated
        if self.fault.nonfinite:
            ok = ok and self.first_nonfinite == expected and self.reference_finite_there
        return ok


# A bug that changes the mathematics is caught with at least this much to spare where it starts (strongest_margin).
LADDER_MARGIN = 10.0


# The short trajectory a trajectory fault is checked on (tests/test_train_faults.py runs the same).
TRAJECTORY = TrainSettings(steps=3, train_size=4, val_size=2)


def check_fault(fault: Fault, batch_size: int | None = None) -> FaultOutcome:
    """One fault on, its scenario run on every side, propagated and isolated; the report's verdicts."""
    if fault.trajectory:
        return _check_trajectory_fault(fault)
    scenario = load_scenarios(fault.scenario, [batch_size or fault.batch_size])[0]
    with injected(fault.name):
        results = run_case(scenario)
    run = build_report(results)["runs"][0]
    hit = run["nonfinite"]["native"][fault.nonfinite] if fault.nonfinite else None
    at = next(r for r in results if r.name == fault.starts_at and r.mode == "propagated")
    isolated = next((r for r in results if r.name == fault.starts_at and r.mode == "isolated"), None)
    return FaultOutcome(
        fault=fault,
        detected=run["failed"] > 0 or run["isolated"]["failed"] > 0,
        first_divergence=(run["first_divergence"] or {}).get("name"),
        first_isolated=(run["isolated"]["first_divergence"] or {}).get("name"),
        first_nonfinite=hit["name"] if hit else None,
        reference_finite_there=bool(hit and hit["other_side_finite"]),
        margin=at.bound.get("native_margin"), reference_margin=at.bound.get("reference_margin"),
        float64_margin=_float64_margin(at), typical_margin=_typical_margin(isolated),
        probe_margin=_probe_margin(isolated),
    )


def _typical_margin(result) -> float | None:
    typical = result.typical if result is not None else {}
    return typical["native"]["margin"] if typical else None


def _probe_margin(result) -> float | None:
    probe = result.probe if result is not None else {}
    return probe["native"]["units"] if probe else None


def _float64_margin(result) -> float | None:
    strict = result.strict64 or {}
    bound = (strict.get("bound") or {}).get("value")
    return strict["max_abs"] / bound if bound and "max_abs" in strict else None


def _check_trajectory_fault(fault: Fault) -> FaultOutcome:
    """The fault on through a short training trajectory; its first divergence as "step N: name" and the margin
    there (largest error / bound, element by element, as in a single-step run)."""
    with injected(fault.name):
        trajectory = run_trajectory(TRAJECTORY)
    first = build_train_report(trajectory, require_learning=False)["first_divergence"]
    where = None if first is None else f"step {first['step']}: {first['name']}"
    margin = None
    if first is not None:
        at = next(r for r in trajectory.steps[first["step"] - 1].results if r.name == first["name"])
        margin = at.bound.get("native_margin")
    return FaultOutcome(fault=fault, detected=first is not None, first_divergence=where, first_isolated=None,
                        first_nonfinite=None, reference_finite_there=False, margin=margin)

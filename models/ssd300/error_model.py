"""SSD300's per-element bounds from a rounding-error model of each stage (docs/tolerance.md).

For a float32 tensor T of one side (the native port, or the reference itself) the bound on |T_side - T_oracle|
is T's own rounding, derived from the operation (its accumulation length n and the sum of its terms'
magnitudes, rounding.gamma), plus the measured deviation of the side's inputs to T's stage carried through the
stage (|W| applied to |dx| for a linear stage; Lipschitz and derivative bounds for the others). It depends on
neither the CPU, the thread count nor the reference's own luck, and it follows the data-flow graph: an upstream
excess loosens only the tensors computed from it, and only by what it carries.

The reference's float32 is a correct implementation: it must pass the same bounds (a failure there is an error
of the harness). The isolated replay feeds the native stage the reference's inputs, so its bound is the
reference's own.
"""

import numpy as np
import torch
import torch.nn.functional as F

from parity.core.error_model import backward, forward, loss
from parity.core.error_model.graph import consumers, producer_of_parameter
from parity.core.error_model.rounding import FLOAT64_U, LAMBDA, U, finished, gamma, u, unit_roundoff

from .reference.routing import window_argmax
from .spec import build_stages

__all__ = ["ErrorModel", "FLOAT64_U", "LAMBDA", "U", "TrainedTrace", "error_model_for", "gamma"]


class TrainedTrace(dict):
    """A side's trace with the weights its step ran with (state_dict key -> array): in a training trajectory each
    side's weights have drifted from the oracle's, and that drift is an input deviation of every stage with
    parameters. A plain dict's weights are the oracle's exactly (a single step from the same weights)."""

    def __init__(self, trace: dict, weights: dict):
        super().__init__(trace)
        self.weights = weights


class ErrorModel:
    """Bounds of one scenario's step. model: the reference (its modules' geometry; its weights are every side's,
    exactly, unless `weights` gives the oracle's own: a trajectory's, TrainedTrace); oracle: the float64 trace;
    images (B,3,300,300) and targets [(boxes, labels)] the scenario's; routing: the near-tie replay the oracle's
    backward ran with (models/ssd300/routing_ties.py); unit_roundoff: that of the sides judged (float32's, or FLOAT64_U
    for the native float64 build's near-ties)."""

    def __init__(self, model, oracle: dict, images: np.ndarray, targets: list, routing: dict | None = None,
                 weights: dict | None = None, unit_roundoff: float = U):
        self.unit_roundoff = unit_roundoff
        self.stages = build_stages(model)
        self.readers = consumers(self.stages)
        self.owners = producer_of_parameter(self.stages)
        weights = model.state_dict() if weights is None else weights
        self.weights = {k: torch.as_tensor(v).detach().to(torch.float64) for k, v in weights.items()}
        self.oracle = oracle
        self.images = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float64))
        self.targets = targets
        self.routing = routing or {}
        self._assumed = {}  # (tensor, id(side)) -> the deviation assumed where the side lacks the tensor
        self.assumed_missing = False  # whether the last bound() assumed a tensor the side lacks (see deviation)

    # -- values and deviations

    def value(self, name: str) -> torch.Tensor:
        if name == "input":
            return self.images
        return torch.from_numpy(np.asarray(self.oracle[name])).to(torch.float64)

    def deviation(self, name: str, side: dict) -> torch.Tensor:
        """|side - oracle| in float64. Where the side lacks the tensor (a partial dump) or has it in another shape
        (which fails there), it is assumed as far off as its own bound lets a correct port be, so what is computed
        from it is judged as if it had passed there: sound, but looser the more is missing (a bound carried
        through every missing layer with |W| grows fast). 0 for priors and index tensors, which are judged exactly."""
        oracle = self.value(name)
        if name == "input":
            return torch.zeros_like(oracle)
        given = self._given(name, side)
        if given is not None:  # a new array: a float64 side's own (the oracle's, say) is never written to
            return torch.as_tensor(given, dtype=torch.float64).sub(oracle).abs_()
        self.assumed_missing = True
        key = (name, id(side))
        if key not in self._assumed:
            assumed = self._bound(name, side)
            self._assumed[key] = (torch.zeros_like(oracle) if assumed is None
                                  else torch.nan_to_num(assumed.reshape(oracle.shape), nan=torch.inf))
        return self._assumed[key].clone()  # callers may work in place on what they derive from it

    def weight_deviation(self, key: str, side: dict) -> torch.Tensor | None:
        """|side's weight - oracle's| in float64 (TrainedTrace), or None where they are the same (every stage's
        bound then skips the term)."""
        given = getattr(side, "weights", {}).get(key)
        if given is None:
            return None
        deviation = torch.as_tensor(np.asarray(given), dtype=torch.float64).sub(self.weights[key]).abs_()
        return deviation if deviation.any() else None

    def _given(self, name: str, side: dict) -> np.ndarray | None:
        """The side's tensor where it has one of the oracle's shape; None where it lacks it or has another shape
        (a partial dump, a layout declared wrong: that tensor fails on its shape), so its values decide nothing."""
        value = side.get(name)
        if value is None or np.shape(value) != np.shape(self.oracle[name]):
            return None
        return np.asarray(value)

    def bound(self, name: str, side: dict) -> np.ndarray | None:
        """Per-element bound on |side[name] - oracle[name]| (NaN, from a non-finite input, becomes +inf: not
        judged here; the non-finite check judges it), or None for a tensor the model does not bound (priors and
        index tensors, judged exactly)."""
        self.assumed_missing = False
        with torch.no_grad(), unit_roundoff(self.unit_roundoff):
            value = self._bound(name, side)
        if value is None:
            return None
        return finished(value.reshape(np.shape(self.oracle[name])).numpy())  # in place: it may be a whole feature map

    def _bound(self, name, side):
        if name in self.stages:
            return self._forward(self.stages[name], side)
        if name.startswith("grad/"):
            return self._tap_gradient(name.removeprefix("grad/"), side)
        if name.startswith("param_grad/"):
            return self._parameter_gradient(name.removeprefix("param_grad/"), side)
        if name in LOSS_BOUNDS:
            return LOSS_BOUNDS[name](self, side)
        return None

    # -- forward

    def _forward(self, stage, side):
        if stage.kind == "conv":
            x = stage.inputs[0]
            return forward.conv(stage.module, self.value(x), self.deviation(x, side), self.weights[stage.weight_key],
                                self.weights[stage.bias_key], self.weight_deviation(stage.weight_key, side),
                                self.weight_deviation(stage.bias_key, side))
        if stage.kind == "pool":
            return forward.pool(stage.module, self.deviation(stage.inputs[0], side))
        if stage.kind == "l2norm":
            x = stage.inputs[0]
            return forward.l2norm(self.value(x), self.deviation(x, side), self.weights[stage.weight_key],
                                  self.value(stage.tap), self.weight_deviation(stage.weight_key, side))
        if stage.kind == "join":
            return forward.join([self.deviation(t, side) for t in stage.inputs], self._columns(stage.tap))
        return None  # priors: bit-identical

    def _columns(self, tap):
        return self.value(tap).shape[-1]

    # -- loss

    def _positive(self):
        return torch.from_numpy(np.asarray(self.oracle["match.matched_idx"])) >= 0

    def _normalizer(self):
        return max(1, int(self._positive().sum()))

    def _labels(self):
        return torch.from_numpy(np.asarray(self.oracle["match.labels"])).to(torch.int64)

    def _selection_weight(self):
        """(B,P): how many times each prior's class loss is summed into loss.conf (positives and mined negatives;
        a positive mined as a negative, when an image runs out of background, twice), over the normalizer."""
        negatives = torch.from_numpy(np.asarray(self.oracle["mining.negatives"]))
        return (self._positive().to(torch.float64) + negatives.to(torch.float64)) / self._normalizer()

    def _targets_loc(self, side):
        matched = torch.from_numpy(np.asarray(self.oracle["match.matched_idx"]))
        priors, dpriors = self.value("priors"), self.deviation("priors", side)
        out = torch.zeros(self.value("targets.loc").shape, dtype=torch.float64)
        for b, (boxes, _) in enumerate(self.targets):
            foreground = torch.where(matched[b] >= 0)[0]
            if foreground.numel():
                gt = torch.from_numpy(np.asarray(boxes, dtype=np.float64))[matched[b][foreground]]
                out[b, foreground] = loss.encode(gt, priors[foreground], dpriors[foreground])
        return out

    def _cross_entropy(self, side):
        return loss.cross_entropy(self.value("conf_head"), self.deviation("conf_head", side), self._labels(),
                                  self.value("loss.cls_per_prior"))

    def _loss_loc(self, side):
        return loss.smooth_l1_sum(self.value("loc_head"), self.deviation("loc_head", side), self.value("targets.loc"),
                                  self.deviation("targets.loc", side), self._positive(), self._normalizer(),
                                  self.value("loss.loc"))

    def _loss_conf(self, side):
        weight = self._selection_weight()
        oracle_negatives = np.asarray(self.oracle["mining.negatives"])
        side_negatives = self._given("mining.negatives", side)
        extra = torch.zeros_like(weight)
        if side_negatives is not None:
            # A prior only one side mined (a tie at the selection boundary): what it adds on that side.
            differ = torch.from_numpy(np.asarray(side_negatives) != oracle_negatives)
            cls, dcls = self.value("loss.cls_per_prior"), self.deviation("loss.cls_per_prior", side)
            extra = torch.where(differ, (cls.abs() + dcls) / self._normalizer(), extra)
        return loss.selected_sum(self.value("loss.cls_per_prior"), self.deviation("loss.cls_per_prior", side), weight,
                                 extra, self.value("loss.conf"))

    def _loss_total(self, side):
        total = self.value("loss.total")
        return (2 * u() * total.abs() + self.deviation("loss.loc", side) + self.deviation("loss.conf", side))

    # -- backward

    def _head_gradient(self, tap, side):
        """grad/loc_head, grad/conf_head: the loss's own backward."""
        if tap == "conf_head":
            return loss.conf_gradient(self.value("conf_head"), self.deviation("conf_head", side), self._labels(),
                                      self._selection_weight())
        return loss.loc_gradient(self.value("loc_head"), self.deviation("loc_head", side), self.value("targets.loc"),
                                 self.deviation("targets.loc", side), self._positive(), self._normalizer())

    def _relu_mask(self, stage, side):
        """Where the gradient may pass the ReLU after `stage`: on the oracle's side, the judged side's, or where the
        routing forced it through (a near-tie): the union, so a replayed tie is covered and a wrong mask is not."""
        out = self.value(stage.tap)
        mask = out > 0
        given = self._given(stage.tap, side)
        if given is not None:
            mask |= torch.from_numpy(given > 0)
        entry = self.routing.get(stage.tap)
        if entry is not None and entry[0] == "relu":
            mask |= entry[1]
        return mask.to(torch.float64)

    def _output_gradient(self, stage, side):
        """The gradient and its deviation at the stage's conv output (after the ReLU's mask)."""
        grad, dgrad = self.value("grad/" + stage.tap), self.deviation("grad/" + stage.tap, side)
        if not stage.relu:
            return grad, dgrad
        if self._given(stage.tap, side) is None:  # the side's decisions here are unknown (a partial dump)
            undecided = self._undecided_relu(stage, side)
            mask = self._relu_mask(stage, side) + undecided
            return grad * mask, dgrad * mask + undecided * grad.abs()
        mask = self._relu_mask(stage, side)
        return grad * mask, dgrad * mask

    def _undecided_relu(self, stage, side):
        """Where a side that does not show this ReLU's output may have decided it either way: the pre-activation
        (the oracle's, recomputed) within its bound of zero. There the side's gradient may be the whole of it or
        nothing. Blocked elements of the oracle only (the mask covers the rest)."""
        x = self.value(stage.inputs[0])
        m = stage.module
        z = F.conv2d(x, self.weights[stage.weight_key], self.weights[stage.bias_key], m.stride, m.padding, m.dilation)
        return ((z <= 0) & (z.abs() <= self.deviation(stage.tap, side))).to(torch.float64)

    def _pool_argmax(self, stage):
        """The window choice the oracle's backward took: its own, or the routed one at a near-tie."""
        argmax = window_argmax(stage.module, self.value(stage.inputs[0]))
        entry = self.routing.get(stage.tap)
        if entry is not None and entry[0] == "pool":
            argmax = torch.where(entry[2], entry[1], argmax)
        return argmax

    def _tap_gradient(self, tap, side):
        if tap in ("loc_head", "conf_head"):
            return self._head_gradient(tap, side)
        if tap.startswith(("head.loc.", "head.conf.")):
            family, level = tap.rsplit(".", 1)
            joined = "loc_head" if family == "head.loc" else "conf_head"
            shapes = [self.value(t).shape for t in self.stages[joined].inputs]
            return forward.split(self.deviation("grad/" + joined, side), shapes)[int(level)]
        readers = self.readers[tap]
        shape = self.value(tap).shape
        terms = sum(backward.conv_terms(self.weights[r.weight_key]) if r.kind == "conv"
                    else r.module.kernel_size ** 2 if r.kind == "pool" else 1 for r in readers)
        g = gamma(terms)
        total = torch.zeros(shape, dtype=torch.float64)
        for r in readers:
            if r.kind == "conv":
                grad, dgrad = self._output_gradient(r, side)
                total += backward.conv_input(r.module, shape, self.weights[r.weight_key], grad, dgrad, g,
                                             self.weight_deviation(r.weight_key, side))
            elif r.kind == "pool":
                grad, dgrad = self.value("grad/" + r.tap), self.deviation("grad/" + r.tap, side)
                total += backward.pool_scatter(self._pool_argmax(r), g * grad.abs() + (1 + g) * dgrad, shape)
                if self._given(tap, side) is None:  # the side's window choices are unknown (a partial dump)
                    total += backward.pool_undecided(r.module, self.value(tap), self.deviation(tap, side),
                                                     grad.abs() + dgrad)
            elif r.kind == "l2norm":
                total += backward.l2norm_input(self.value(tap), self.deviation(tap, side), self.weights[r.weight_key],
                                               self.value("grad/" + r.tap), self.deviation("grad/" + r.tap, side), g,
                                               self.weight_deviation(r.weight_key, side))
        return total

    def _parameter_gradient(self, key, side):
        stage, part = self.owners[key]
        if stage.kind == "l2norm":
            x = stage.inputs[0]
            return backward.l2norm_scale(self.value(x), self.deviation(x, side), self.value("grad/" + stage.tap),
                                         self.deviation("grad/" + stage.tap, side))
        grad, dgrad = self._output_gradient(stage, side)
        if part == "bias":
            return backward.conv_bias(grad, dgrad)
        x = stage.inputs[0]
        return backward.conv_weight(stage.module, self.value(x), self.deviation(x, side),
                                    self.weights[stage.weight_key].shape, grad, dgrad)


def error_model_for(traces) -> ErrorModel:
    """The error model of a models.ssd300.sides.SideTraces (a forward-only run bounds its forward taps alone)."""
    from .sides import reference_model_for

    scenario = traces.scenario
    return ErrorModel(reference_model_for(scenario), traces.oracle, scenario.images(), scenario.targets(),
                      traces.routing)


LOSS_BOUNDS = {
    "targets.loc": ErrorModel._targets_loc,
    "loss.cls_per_prior": ErrorModel._cross_entropy,
    "loss.loc": ErrorModel._loss_loc,
    "loss.conf": ErrorModel._loss_conf,
    "loss.total": ErrorModel._loss_total,
}

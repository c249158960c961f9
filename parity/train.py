"""Training-trajectory parity: the native SSD and the reference train from the same weights on the same batches in
the same order, with the same SGD, and are compared step by step.

Three sides train side by side: the native float32 model, the reference in float32, and the reference in float64
(the oracle that derives every bound, as in a single-step run). Each number says when it was taken:
- train loss: on the step's batch, *before* that step's update (the forward pass the step's gradient comes from);
- validation loss: on the held-out items, *after* the update that ends an epoch (and once before training),
  with no gradient;
- parameters and momentum buffers: right *after* the step's update.
Every step's trace (forward, loss and gradients) is judged by the error model's per-element bounds as in a
single-step run (parity/core/error_model), with each side's own weights as one more measured input deviation (they
drift apart as the sides train); the update by the bounds of SGD's few roundings, carrying each side's measured
deviations of parameter, momentum buffer and gradient (parity/core/error_model/sgd.py). The reference's float32 is held
to the same bounds. Where rounding left a pool window, ReLU, match or negative pick tied (within those bounds) and
the native side took the other element, the reference's and the oracle's backward take the native decision there
(models/ssd300/routing_ties.py), so all three sides keep training the same mathematics.
"""

from dataclasses import asdict, dataclass, field

import numpy as np
import ssd_native
import torch

from models.ssd300.error_model import ErrorModel, TrainedTrace
from models.ssd300.reference.configs import get_config
from models.ssd300.reference.model import build_reference, state_dict_arrays
from models.ssd300.reference.step import PendingStep
from models.ssd300.routing_ties import reconcile, tie_counts
from models.ssd300.rules import RULES

from .core.compare import compare_tensor, compare_traces
from .core.error_model import sgd
from .core.heap import large_blocks_returned, release_memory
from .dataset import SyntheticDetection


@dataclass(frozen=True)
class TrainSettings:
    config: str = "narrow"
    weights_seed: int = 0
    data_seed: int = 0
    train_size: int = 16
    val_size: int = 4
    batch_size: int = 2
    steps: int = 24
    lr: float = 1e-4  # 1e-3 also trains, but overshoots (the loss oscillates) and trajectories part faster
    momentum: float = 0.9
    weight_decay: float = 5e-4

    def __post_init__(self):
        get_config(self.config)
        for name in ("train_size", "val_size", "batch_size", "steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def optimizer(self) -> dict:
        return {"lr": self.lr, "momentum": self.momentum, "weight_decay": self.weight_decay}


SIDES = ("native", "reference", "oracle")


@dataclass
class StepRecord:
    step: int  # 1-based
    epoch: int  # 0-based
    batch: list  # item indices
    train_loss: dict  # side -> loss.total on this batch, before this step's update
    ties: dict  # tap -> near-tied decisions replayed in the reference's step
    results: list  # TensorResults: the step's trace (before the update), then momentum/<key> and param/<key> after it
    drift: dict  # largest relative difference over all parameters after the update: native vs reference, and
    # reference vs oracle (the float32 noise it is measured against)


@dataclass
class TrajectoryReport:
    settings: dict
    steps: list = field(default_factory=list)
    validation: list = field(default_factory=list)  # {"after_step", "when", "loss": {side: mean}, "verdict", ...}
    initial_parameters_changed: dict = field(default_factory=dict)


def _finite_max_rel(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    scale = np.abs(b) + np.finfo(np.float32).eps * max(float(np.abs(b).max(initial=0.0)), 1e-30)
    return float(np.max(np.abs(a - b) / scale, initial=0.0))


def _boxes_and_labels(targets: list) -> tuple:
    return [b for b, _ in targets], [l for _, l in targets]


class TrainingSides:
    """The three models and their optimizers, kept in step."""

    def __init__(self, settings: TrainSettings):
        config = get_config(settings.config)
        self.settings = settings
        self.reference = build_reference(config, settings.weights_seed, torch.float32)
        self.oracle = build_reference(config, settings.weights_seed, torch.float64)
        self.native = ssd_native.ModelFloat32(state_dict_arrays(self.reference))
        self.optimizers = {side: torch.optim.SGD(model.parameters(), **settings.optimizer)
                           for side, model in (("reference", self.reference), ("oracle", self.oracle))}
        self.initial = {k: v.copy() for k, v in state_dict_arrays(self.reference).items()}
        self.keys = list(self.initial)

    def _pending_steps(self, images: np.ndarray, targets: list) -> tuple:
        """The reference and the oracle with their step's forward done and its backward not yet run."""
        pending = []
        for model, dtype in ((self.reference, np.float32), (self.oracle, np.float64)):
            boxes = [torch.from_numpy(b.astype(dtype)) for b, _ in targets]
            labels = [torch.from_numpy(l) for _, l in targets]
            pending.append(PendingStep(model, torch.from_numpy(images.astype(dtype)), boxes, labels))
        return tuple(pending)

    def initial_state(self) -> dict:
        """name -> {side: array} before any update: every side's parameters, no momentum buffer yet."""
        return {f"param/{k}": {"native": v, "reference": v, "oracle": v.astype(np.float64)}
                for k, v in self.initial.items()}

    def _weights(self, state: dict) -> dict:
        return {side: {k: state[f"param/{k}"][side] for k in self.keys} for side in SIDES}

    def _reconciled(self, native: dict, pending: tuple, images: np.ndarray, targets: list, weights: dict) -> tuple:
        """-> (routing, the reference's and the oracle's forward traces under it): near-ties found within the error
        model's bounds of either float32 side, the oracle's own held to the native decisions too (every_run: an
        oracle that decided a tie its own way would train other mathematics)."""
        forward = tuple(p.forward_trace() for p in pending)
        bounds = ErrorModel(self.reference, forward[1], images, targets, weights=weights["oracle"])
        reference = TrainedTrace(forward[0], weights["reference"])
        window = lambda tap: np.maximum(bounds.bound(tap, native), bounds.bound(tap, reference))
        with large_blocks_returned():  # the bounds' temporaries would fragment the heap
            return reconcile(self.reference, native, forward, lambda r: tuple(p.forward_trace(r) for p in pending),
                             every_run=True, window=window)

    def step(self, images: np.ndarray, targets: list, state: dict) -> tuple:
        """One training step on every side from `state` (the parameters every side holds now) -> (native trace,
        reference trace, oracle trace, routing), all taken before the update; the updates are then applied. The
        float32 traces carry the weights their step ran with (TrainedTrace)."""
        weights = self._weights(state)
        native = TrainedTrace(self.native.forward_backward(images, *_boxes_and_labels(targets)), weights["native"])
        self.native.sgd_step(**self.settings.optimizer)
        pending = self._pending_steps(images, targets)
        routing, _ = self._reconciled(native, pending, images, targets, weights)
        # Views, not copies: nothing writes to a finished step's tensors (the next step's gradients are new ones).
        reference, oracle = ({name: t.numpy() for name, t in p.backward(routing).items()} for p in pending)
        for optimizer in self.optimizers.values():  # each model's gradients follow the routing
            optimizer.step()
        return native, TrainedTrace(reference, weights["reference"]), oracle, routing

    def validate(self, dataset: SyntheticDetection, state: dict, case: str) -> tuple:
        """The validation batches on every side, no gradient, with the weights of `state` (every side's now) ->
        (mean loss.total per side, every batch's forward and loss taps judged as in a step)."""
        weights, results = self._weights(state), []
        totals = {side: [] for side in SIDES}
        indices = dataset.val_indices
        for number, start in enumerate(range(0, len(indices), self.settings.batch_size)):
            images, targets = dataset.batch(indices[start:start + self.settings.batch_size])
            with torch.no_grad():
                native = TrainedTrace(self.native.evaluate(images, *_boxes_and_labels(targets), all_taps=True),
                                      weights["native"])
                routing, (reference, oracle) = self._reconciled(native, self._pending_steps(images, targets), images,
                                                                targets, weights)
            error_model = ErrorModel(self.reference, oracle, images, targets, routing, weights=weights["oracle"])
            results += compare_traces(RULES, f"{case}-batch{number}", len(images), native,
                                      TrainedTrace(reference, weights["reference"]), oracle,
                                      routing_ties=tie_counts(routing), error_model=error_model)
            for side, trace in (("native", native), ("reference", reference), ("oracle", oracle)):
                totals[side].append(float(trace["loss.total"]))
        return {side: float(np.mean(values)) for side, values in totals.items()}, results

    def state_after_update(self):
        """-> (key, {"momentum/<key>": {side: array}, "param/<key>": {side: array}}) for every state_dict key, one
        at a time (copies of a full SSD300's state on three sides are 0.8 GB): its momentum buffer and parameter
        right after the latest update (a buffer the native side lacks is None there)."""
        native_params, native_buffers = self.native.state_dict(), self.native.momentum_buffers()
        sides = {"reference": self.reference, "oracle": self.oracle}
        params = {side: dict(model.named_parameters()) for side, model in sides.items()}
        for key in self.keys:
            buffers = {side: self.optimizers[side].state[params[side][key]].get("momentum_buffer") for side in sides}
            entry = {}
            if all(b is not None for b in buffers.values()):
                entry[f"momentum/{key}"] = {"native": native_buffers.get(key),
                                            **{side: b.numpy().copy() for side, b in buffers.items()}}
            entry[f"param/{key}"] = {"native": native_params[key],
                                     **{side: params[side][key].detach().numpy().copy() for side in sides}}
            yield key, entry


def _deviation(side: np.ndarray | None, oracle: np.ndarray) -> np.ndarray:
    """|side - oracle| in float64; +inf where the side lacks the value or has another shape (that tensor failed
    where it was produced, so what is computed from it is not judged again)."""
    if side is None or np.shape(side) != np.shape(oracle):
        return np.full(np.shape(oracle), np.inf)
    return np.abs(np.subtract(side, oracle, dtype=np.float64))


def _update_bounds(key: str, before: dict, gradients: dict, settings: TrainSettings) -> tuple:
    """-> ({side: bound on its momentum buffer}, {side: bound on its parameter}) after this step's update of `key`
    (parity/core/error_model/sgd.py), from each float32 side's measured deviations before it: its parameter, its buffer
    and this step's gradient."""
    p, g = before[f"param/{key}"]["oracle"], gradients["oracle"]
    buffer = before.get(f"momentum/{key}")
    buffer_bounds, param_bounds = {}, {}
    for side in ("native", "reference"):
        dp = _deviation(before[f"param/{key}"][side], p)
        dg = _deviation(gradients[side], g)
        b = db = None
        if buffer is not None and settings.momentum != 0:
            b, db = buffer["oracle"], _deviation(buffer[side], buffer["oracle"])
        buffer_bounds[side], param_bounds[side] = sgd.update(p, dp, b, db, g, dg, settings.lr, settings.momentum,
                                                             settings.weight_decay)
    return buffer_bounds, param_bounds


def _compare_update(case: str, batch_size: int, key: str, before: dict, after: dict, gradients: dict,
                    settings: TrainSettings) -> dict:
    """name -> TensorResult for one key's momentum buffer and parameter after the update."""
    bounds = dict(zip(("momentum", "param"), _update_bounds(key, before, gradients, settings)))
    results = {}
    for name, sides in after.items():  # a momentum buffer missing on the native side (None) fails by name
        kind = name.split("/")[0]
        result = compare_tensor(RULES, name, case, batch_size, sides["native"], sides["reference"], sides["oracle"],
                                bounds=(bounds[kind]["native"], bounds[kind]["reference"]))
        result.kind = kind
        results[name] = result
    return results


def _judged_step(sides: TrainingSides, case: str, images: np.ndarray, targets: list, state: dict) -> tuple:
    """One training step on every side, judged: its trace by the error model, then each key's update -> (results,
    drift, train loss per side, ties). `state` (name -> {side: array}) moves to after the update, key by key."""
    settings, batch_size = sides.settings, len(images)
    native, reference, oracle, routing = sides.step(images, targets, state)
    release_memory()  # the step's freed temporaries: the comparison's large blocks are mapped afresh
    losses = {side: float(trace["loss.total"]) for side, trace in zip(SIDES, (native, reference, oracle))}
    error_model = ErrorModel(sides.reference, oracle, images, targets, routing,
                             weights={k: state[f"param/{k}"]["oracle"] for k in sides.keys})
    results = compare_traces(RULES, case, batch_size, native, reference, oracle, routing_ties=tie_counts(routing),
                             error_model=error_model)
    gradients = {key: {"native": native.get(f"param_grad/{key}"), "reference": reference[f"param_grad/{key}"],
                       "oracle": oracle[f"param_grad/{key}"]} for key in sides.keys}
    del native, reference, oracle, error_model  # the step's traces (2.3 GB, full SSD300 at batch 2)
    updates, drift = {}, {"native_vs_reference": 0.0, "reference_vs_oracle": 0.0}
    for key, after in sides.state_after_update():
        updates.update(_compare_update(case, batch_size, key, state, after, gradients.pop(key), settings))
        param = after[f"param/{key}"]
        drift["native_vs_reference"] = max(drift["native_vs_reference"],
                                           _finite_max_rel(param["native"], param["reference"]))
        drift["reference_vs_oracle"] = max(drift["reference_vs_oracle"],
                                           _finite_max_rel(param["reference"], param["oracle"]))
        state.update(after)  # the state before this update is no longer needed for this key
    # momentum buffers first, then parameters: the order the update writes them
    results += sorted(updates.values(), key=lambda r: not r.name.startswith("momentum/"))
    return results, drift, losses, tie_counts(routing)


def run_trajectory(settings: TrainSettings, progress=None) -> TrajectoryReport:
    dataset = SyntheticDetection(settings.data_seed, settings.train_size, settings.val_size)
    sides = TrainingSides(settings)
    report = TrajectoryReport(settings=asdict(settings))

    def validate(after_step: int, why: str):
        loss, results = sides.validate(dataset, state, f"validation-after-step{after_step}")
        failed = [r for r in results if not r.passed]
        report.validation.append({
            "after_step": after_step,
            "when": "before any update" if after_step == 0 else f"after the update of step {after_step} ({why})",
            "loss": loss, "verdict": "fail" if failed else "pass", "compared": len(results), "failed": len(failed),
            "results": [r.to_dict() for r in results]})

    state = sides.initial_state()  # name -> {side: array}: what every side holds now, before the next update
    validate(0, "")
    step, per_epoch = 0, len(dataset.epoch_batches(0, settings.batch_size))
    for epoch in range(-(-settings.steps // per_epoch)):
        batches = dataset.epoch_batches(epoch, settings.batch_size)[: settings.steps - step]
        for batch in batches:
            step += 1
            images, targets = dataset.batch(batch)
            case = f"train-{settings.config}-B{settings.batch_size}-step{step}"
            results, drift, losses, ties = _judged_step(sides, case, images, targets, state)
            report.steps.append(StepRecord(step, epoch, batch, losses, ties, results, drift))
            if progress:
                progress(report.steps[-1])
        validate(step, f"end of epoch {epoch}" if len(batches) == per_epoch else f"end of the run, in epoch {epoch}")
    final = sides.native.state_dict()
    report.initial_parameters_changed = {
        "native": {k: bool(np.any(final[k] != sides.initial[k])) for k in sides.keys},
        "reference": {k: bool(np.any(p.detach().numpy() != sides.initial[k]))
                      for k, p in sides.reference.named_parameters()},
    }
    return report

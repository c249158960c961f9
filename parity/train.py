"""Training-trajectory parity: the native SSD and the reference train from the same weights on the same batches in
the same order, with the same SGD, and are compared step by step.

Three sides train side by side: the native float32 model, the reference in float32, and the reference in float64
(the oracle that derives every bound, as in a single-step run). Each number says when it was taken:
- train loss: on the step's batch, *before* that step's update (the forward pass the step's gradient comes from);
- validation loss: on the held-out items, *after* the update that ends an epoch (and once before training),
  with no gradient;
- parameters and momentum buffers: right *after* the step's update.
Where rounding left a pool window, ReLU or negative pick tied and the native side took the other element, the
reference steps' backward takes the native decision there, as in a single-step run (parity/routing_ties.py).
"""

from dataclasses import asdict, dataclass, field

import numpy as np
import torch

import ssd_native
from reference.configs import get_config
from reference.loss import run_loss
from reference.model import build_reference, state_dict_arrays
from reference.step import PendingStep
from reference.taps import run_forward

from .compare import TensorResult, compare_tensor, compare_traces
from .dataset import SyntheticDetection
from .routing_ties import reconcile, tie_counts


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


@dataclass
class StepRecord:
    step: int  # 1-based
    epoch: int  # 0-based
    batch: list  # item indices
    train_loss: dict  # side -> loss.total on this batch, before this step's update
    ties: dict  # tap -> near-tied decisions replayed in the reference's step
    results: list  # TensorResults: loss.total (before the update), then momentum/<key> and param/<key> after it
    drift: dict  # largest relative difference over all parameters after the update: native vs reference, and
    # reference vs oracle (the float32 noise it is measured against)


@dataclass
class TrajectoryReport:
    settings: dict
    steps: list = field(default_factory=list)
    validation: list = field(default_factory=list)  # {"after_step", "when", "loss": {side: value}, "result"}
    initial_parameters_changed: dict = field(default_factory=dict)


def _finite_max_rel(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    scale = np.abs(b) + np.finfo(np.float32).eps * max(float(np.abs(b).max(initial=0.0)), 1e-30)
    return float(np.max(np.abs(a - b) / scale, initial=0.0))


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

    def step(self, images: np.ndarray, targets: list) -> tuple:
        """One training step on every side -> (native trace, reference trace, oracle trace, ties), all taken before
        the update; the updates are then applied."""
        native = self.native.forward_backward(images, [b for b, _ in targets], [l for _, l in targets])
        self.native.sgd_step(**self.settings.optimizer)
        pending = self._pending_steps(images, targets)
        routing, _ = reconcile(self.reference, native, tuple(p.forward_trace() for p in pending),
                               lambda r: tuple(p.forward_trace(r) for p in pending), every_run=True)
        # Views, not copies: nothing writes to a finished step's tensors (the next step's gradients are new ones).
        reference, oracle = ({name: t.numpy() for name, t in p.backward(routing).items()} for p in pending)
        for optimizer in self.optimizers.values():  # each model's gradients follow the routing
            optimizer.step()
        return native, reference, oracle, tie_counts(routing)

    def state(self) -> dict:
        """name -> {side: array}: every momentum buffer and parameter after the latest update."""
        native_params, native_buffers = self.native.state_dict(), self.native.momentum_buffers()
        sides = {"reference": self.reference, "oracle": self.oracle}
        params = {side: dict(model.named_parameters()) for side, model in sides.items()}
        state = {}
        for key in self.keys:
            buffers = {side: self.optimizers[side].state[params[side][key]].get("momentum_buffer") for side in sides}
            if all(b is not None for b in buffers.values()):
                state[f"momentum/{key}"] = {"native": native_buffers.get(key),
                                           **{side: b.numpy().copy() for side, b in buffers.items()}}
        for key in self.keys:
            state[f"param/{key}"] = {"native": native_params[key],
                                     **{side: params[side][key].detach().numpy().copy() for side in sides}}
        return state

    def validation_loss(self, dataset: SyntheticDetection) -> dict:
        """Mean loss.total over the validation batches, no gradient, every side."""
        totals = {"native": [], "reference": [], "oracle": []}
        indices = dataset.val_indices
        for start in range(0, len(indices), self.settings.batch_size):
            images, targets = dataset.batch(indices[start:start + self.settings.batch_size])
            totals["native"].append(self.native.evaluate(images, [b for b, _ in targets],
                                                         [l for _, l in targets])["loss.total"])
            for side, model, dtype in (("reference", self.reference, np.float32), ("oracle", self.oracle, np.float64)):
                with torch.no_grad():
                    taps = run_forward(model, torch.from_numpy(images.astype(dtype)))
                    losses = run_loss(model, taps["loc_head"], taps["conf_head"], taps["priors"],
                                      [torch.from_numpy(b.astype(dtype)) for b, _ in targets],
                                      [torch.from_numpy(l) for _, l in targets])
                totals[side].append(float(losses["loss.total"]))
        return {side: float(np.mean(values)) for side, values in totals.items()}


def _compare_scalar(name: str, case: str, batch_size: int, values: dict) -> TensorResult:
    return compare_tensor(name, case, batch_size, np.float32(values["native"]).reshape(()),
                          np.float32(values["reference"]).reshape(()), np.float64(values["oracle"]).reshape(()))


def _gradient_provenance(case: str, batch_size: int, native: dict, reference: dict, oracle: dict,
                         provenance: dict) -> None:
    """Fold this step's parameter gradients into provenance: key -> (fewest informative elements, largest inherited
    error ratio) over the steps so far, as the step's own comparison (compare_traces) derived them. A momentum buffer
    and a parameter are sums of those gradients, so they are judged with the same factor: a head's weight gradient
    fed by a few non-zero location gradients carries a few correlated roundings however many weights it has
    (parity/tolerance.py), and so does every buffer built from it."""
    for result in compare_traces(case, batch_size, native, reference, oracle):
        if not result.name.startswith("param_grad/") or result.bound.get("rule") != "oracle":
            continue
        key = result.name.removeprefix("param_grad/")
        informative, inherited = result.bound["informative"], result.bound["inherited"]
        if key in provenance:
            informative, inherited = min(informative, provenance[key][0]), max(inherited, provenance[key][1])
        provenance[key] = (informative, inherited)


def _compare_state(case: str, batch_size: int, state: dict, provenance: dict) -> list:
    results = []
    for name, sides in state.items():  # a momentum buffer missing on the native side (None) fails by name
        informative, inherited = provenance.get(name.split("/", 1)[1], (None, 1.0))
        result = compare_tensor(name, case, batch_size, sides["native"], sides["reference"], sides["oracle"],
                                inherited=inherited, fed_by=informative)
        result.kind = name.split("/")[0]
        results.append(result)
    return results


def run_trajectory(settings: TrainSettings, progress=None) -> TrajectoryReport:
    dataset = SyntheticDetection(settings.data_seed, settings.train_size, settings.val_size)
    sides = TrainingSides(settings)
    report = TrajectoryReport(settings=asdict(settings))

    def validate(after_step: int, why: str):
        loss = sides.validation_loss(dataset)
        result = _compare_scalar("validation.loss.total", f"after-step{after_step}", settings.batch_size, loss)
        report.validation.append({
            "after_step": after_step,
            "when": "before any update" if after_step == 0 else f"after the update of step {after_step} ({why})",
            "loss": loss, "result": result.to_dict()})

    validate(0, "")
    provenance = {}  # see _gradient_provenance
    step, per_epoch = 0, len(dataset.epoch_batches(0, settings.batch_size))
    for epoch in range(-(-settings.steps // per_epoch)):
        batches = dataset.epoch_batches(epoch, settings.batch_size)[: settings.steps - step]
        for batch in batches:
            step += 1
            images, targets = dataset.batch(batch)
            native, reference, oracle, ties = sides.step(images, targets)
            case = f"train-{settings.config}-B{settings.batch_size}-step{step}"
            losses = {"native": native["loss.total"], "reference": reference["loss.total"], "oracle": oracle["loss.total"]}
            results = [_compare_scalar("loss.total", case, len(batch), losses)]
            _gradient_provenance(case, len(batch), native, reference, oracle, provenance)
            del native, reference, oracle  # the step's traces (2.3 GB, full SSD300 at batch 2): not beside the next's
            state = sides.state()
            results += _compare_state(case, len(batch), state, provenance)
            drift = {
                "native_vs_reference": max(_finite_max_rel(s["native"], s["reference"]) for n, s in state.items()
                                           if n.startswith("param/")),
                "reference_vs_oracle": max(_finite_max_rel(s["reference"], s["oracle"]) for n, s in state.items()
                                           if n.startswith("param/")),
            }
            report.steps.append(StepRecord(step, epoch, batch, {k: float(v) for k, v in losses.items()}, ties,
                                           results, drift))
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

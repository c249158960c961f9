"""The two sides of a parity run: the torchvision reference (float32, and float64 as the oracle) and the native
C++ model (float32, and float64 for the strict check), built from the same seeded weights."""

import copy
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import ssd_native
import torch

from .error_model import FLOAT64_U, ErrorModel
from .reference.configs import get_config
from .reference.model import build_reference, state_dict_arrays
from .reference.step import PendingStep, run_step
from .reference.taps import run_forward
from .routing_ties import native_step_routing, reconcile, same_routing, tie_counts
from .scenarios import Scenario

NATIVE_MODELS = {np.dtype(np.float32): ssd_native.ModelFloat32, np.dtype(np.float64): ssd_native.ModelFloat64}
TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}


def reference_model(config: str, seed: int, dtype: str, conf_head_scale: float = 1.0, zero_biases: bool = False):
    """The seeded reference; a scenario may scale the classification head (large logits) or zero every bias
    (torchvision's own init: then an all-zero image stays exactly zero through the network).

    The float32 model is cached (its seeded init is most of a model's build time: 1.9 s of 2.5 s for SSD300). The
    float64 model is the float32 one widened, built afresh for each use (0.2 s for SSD300) and never cached: the
    oracle computes exactly the float32 sides' weights (a head scaled in float64 would differ from them by a
    rounding), and its weights and gradients (0.4 GB for SSD300) go as soon as the case that used them has its
    traces, instead of staying beside every later case's."""
    model = _float32_reference(config, seed, conf_head_scale, zero_biases)
    if np.dtype(dtype) == np.float32:
        return model
    widened = copy.deepcopy(model)
    widened.zero_grad(set_to_none=True)
    return widened.to(TORCH_DTYPES[np.dtype(dtype)])


@lru_cache(maxsize=8)
def _float32_reference(config: str, seed: int, conf_head_scale: float, zero_biases: bool):
    model = build_reference(get_config(config), seed, torch.float32)
    with torch.no_grad():
        for param in model.head.classification_head.parameters():
            param.mul_(conf_head_scale)
        if zero_biases:
            for name, param in model.named_parameters():
                if name.endswith(".bias"):
                    param.zero_()
    return model


def native_model(config: str, seed: int, dtype: str, conf_head_scale: float = 1.0, zero_biases: bool = False):
    """The native model of reference_model's weights: the float32 one cached, the float64 one built afresh from
    the float32 weights widened (exact), as reference_model does."""
    if np.dtype(dtype) == np.float32:
        return _float32_native(config, seed, conf_head_scale, zero_biases)
    weights = state_dict_arrays(_float32_reference(config, seed, conf_head_scale, zero_biases))
    return NATIVE_MODELS[np.dtype(dtype)]({name: value.astype(dtype) for name, value in weights.items()})


@lru_cache(maxsize=8)
def _float32_native(config: str, seed: int, conf_head_scale: float, zero_biases: bool):
    return ssd_native.ModelFloat32(state_dict_arrays(_float32_reference(config, seed, conf_head_scale, zero_biases)))


def forget_models() -> None:
    """Let the cached float32 models go (rebuilt on next use, 2.5 s for SSD300): the full SSD300's two (each side,
    with their parameter gradients) hold 0.5 GB, which a later test that builds models of its own (a training
    trajectory) would otherwise hold beside its own."""
    _float32_native.cache_clear()
    _float32_reference.cache_clear()


def _key(scenario: Scenario, dtype: np.dtype) -> tuple:
    return (scenario.config, scenario.weights_seed, np.dtype(dtype).name, scenario.conf_head_scale,
            scenario.zero_biases)


def native_model_for(scenario: Scenario, dtype=np.float32):
    """The scenario's native model: the cached one in float32, a new one in float64 (reference_model)."""
    return native_model(*_key(scenario, dtype))


def reference_model_for(scenario: Scenario, dtype=np.float32):
    """The scenario's reference: the cached one in float32, a new one in float64 (reference_model)."""
    return reference_model(*_key(scenario, dtype))


def reference_forward(scenario: Scenario, images: np.ndarray) -> dict:
    model = reference_model_for(scenario, images.dtype)
    with torch.no_grad():
        taps = run_forward(model, torch.from_numpy(images))
    return {name: t.detach().numpy().copy() for name, t in taps.items()}


def native_forward(scenario: Scenario, images: np.ndarray) -> dict:
    return native_model_for(scenario, images.dtype).forward(images)


def _torch_targets(targets: list, dtype: np.dtype) -> tuple:
    boxes = [torch.from_numpy(b.astype(dtype)) for b, _ in targets]
    labels = [torch.from_numpy(l) for _, l in targets]
    return boxes, labels


def _as_arrays(trace: dict) -> dict:
    return {name: t.numpy() for name, t in trace.items()}


def pending_reference_step(scenario: Scenario, images: np.ndarray, targets: list) -> PendingStep:
    """The scenario's training step(s) on the reference, the last one stopped before its backward (which then
    follows the native side's near-tie decisions). Every step starts from zeroed gradients without an update, so
    the earlier steps leave the reference as it was; they run only to keep the sides symmetrical."""
    model = reference_model_for(scenario, images.dtype)
    boxes, labels = _torch_targets(targets, images.dtype)
    for _ in range(scenario.steps - 1):
        run_step(model, torch.from_numpy(images), boxes, labels)
    return PendingStep(model, torch.from_numpy(images), boxes, labels)


def native_step(scenario: Scenario, images: np.ndarray, targets: list, routing: dict | None = None) -> dict:
    """The scenario's training step(s) on the native model; the last step's trace. routing: near-tie decisions
    (models/ssd300/routing_ties.py) the last step takes where masked."""
    model = native_model_for(scenario, images.dtype)
    boxes = [np.ascontiguousarray(b, dtype=images.dtype) for b, _ in targets]
    labels = [l for _, l in targets]
    for _ in range(scenario.steps - 1):
        model.forward_backward(images, boxes, labels)
    return model.forward_backward(images, boxes, labels, native_step_routing(routing or {}))


@dataclass
class SideTraces:
    """One scenario run on every side; each trace maps tap name -> array, in execution order."""

    scenario: Scenario
    reference: dict  # torch float32
    oracle: dict  # torch float64, the yardstick for both float32 sides
    native: dict  # C++ float32
    native64: dict | None  # C++ float64, held to the oracle at near machine precision (None for a dump)
    oracle_for_native64: dict | None = None  # the oracle with native64's own routing ties replayed too, if it had any
    routing_ties: dict = field(default_factory=dict)  # tap -> count of near-tied decisions routed as the native side did
    routing: dict = field(default_factory=dict)  # tap -> the replay entry itself (reference/routing.py)
    reference_bounds: dict = field(default_factory=dict)  # tap -> the reference's error-model bound (compare_sides)

    def drop_native64(self) -> None:
        """Free the float64 native trace and the oracle it alone is held to, once the strict checks have read them."""
        self.native64 = self.oracle_for_native64 = None

    def drop_native(self) -> None:
        """Free both native traces once the propagated comparison has read them: the isolated replay reads only the
        reference's and the oracle's, and reuses their memory (3 GB at SSD300 batch 4) instead of faulting in more."""
        self.native = self.native64 = self.oracle_for_native64 = None

    @property
    def strict_oracle(self) -> dict:
        return self.oracle_for_native64 if self.oracle_for_native64 is not None else self.oracle


def native64_routing(model, native64: dict, taken: dict, oracle_trace, images: np.ndarray, targets: list) -> dict:
    """The routing the native float64 step is held to: `taken` (the one it ran with), plus its own near-ties against
    the oracle (oracle_trace(routing): the oracle's forward trace under a routing). Those are float64's: a decision
    within twice native64's error-model bound in float64 (the oracle's own rounding is as large as native64's)."""
    oracle = oracle_trace(taken)
    bounds = ErrorModel(model, oracle, images, targets, unit_roundoff=FLOAT64_U)
    routing, _ = reconcile(model, native64, (oracle,), lambda r: (oracle_trace(r),), start=taken, native_routing=taken,
                           window=lambda tap: 2 * bounds.bound(tap, native64))
    return routing


def run_sides(scenario: Scenario, step: bool = True, native: dict | None = None) -> SideTraces:
    """The scenario on all sides: the whole training step (forward, loss, backward), or forward alone.

    native: a float32 trace produced elsewhere (a dump, parity/dump.py) to use instead of running the native
    module; there is then no float64 native side and no strict check."""
    images = scenario.images()
    images64 = images.astype(np.float64)
    external = native is not None
    if not step:
        return SideTraces(scenario, reference_forward(scenario, images), reference_forward(scenario, images64),
                          native if external else native_forward(scenario, images),
                          None if external else native_forward(scenario, images64))
    targets = scenario.targets()
    native_trace = native if external else native_step(scenario, images, targets)
    reference = pending_reference_step(scenario, images, targets)
    oracle = pending_reference_step(scenario, images64, targets)
    # Near-tied decisions (pool windows, ReLUs, mining) the native side took differently: the reference's backward
    # takes the native decision there, so gradients upstream compare like for like; the ties are reported.
    model = reference_model_for(scenario)
    # every_run: the oracle takes the native decision at its own near-ties too (a prior at the IoU threshold, a
    # window the float32 sides both decided the other way), so every side computes the same mathematics and the
    # error model's bounds (parity/core/error_model) compare like with like.
    # A near-tie is a decision within the error model's bounds of both float32 sides (machine-independent).
    reference_taps, oracle_taps = reference.forward_trace(), oracle.forward_trace()
    # A decision whose tensor a partial dump lacks is taken the reference's way (parity/partial.py).
    deciding = {**reference_taps, **native_trace} if external else native_trace
    bounds = ErrorModel(model, oracle_taps, images, targets)
    window = lambda tap: np.maximum(bounds.bound(tap, deciding), bounds.bound(tap, reference_taps))
    routing, _ = reconcile(model, deciding, (reference_taps, oracle_taps),
                           lambda r: (reference.forward_trace(r), oracle.forward_trace(r)), every_run=True, window=window)
    reference_trace = _as_arrays(reference.backward(routing))
    oracle_trace = _as_arrays(oracle.backward(routing, keep_graph=not external))
    # native64 takes the same decisions at those ties, so the oracle's one routed backward serves both native sides;
    # native64's own near-ties against the oracle (often none) are routed its way on top, in a second backward of
    # the oracle only if there are any (so the oracle keeps its graph until then). native64 runs after the
    # oracle's backward, so the two never need their working memory at once.
    native64 = strict_oracle = None
    if not external:
        native64 = native_step(scenario, images64, targets, routing)
        # A native step decides its matches itself (native_step_routing leaves matching out), as the oracle did
        # before it took the float32 matches at its near-ties: native64 is held to the oracle without them.
        taken = {tap: entry for tap, entry in routing.items() if entry[0] != "match"}
        routing64 = native64_routing(model, native64, taken, lambda r: oracle.forward_trace(r), images, targets)
        if not same_routing(routing, routing64):
            strict_oracle = _as_arrays(oracle.backward(routing64))
    return SideTraces(scenario, reference_trace, oracle_trace, native_trace, native64, strict_oracle,
                      tie_counts(routing), routing)

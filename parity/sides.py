"""The two sides of a parity run: the torchvision reference (float32, and float64 as the oracle) and the native
C++ model (float32, and float64 for the strict check), built from the same seeded weights."""

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import torch

import ssd_native
from reference.configs import get_config
from reference.model import build_reference, state_dict_arrays
from reference.step import run_step
from reference.taps import run_forward

from .routing_ties import reconcile, tie_counts
from .scenario import Scenario

NATIVE_MODELS = {np.dtype(np.float32): ssd_native.ModelFloat32, np.dtype(np.float64): ssd_native.ModelFloat64}
TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}


@lru_cache(maxsize=8)
def reference_model(config: str, seed: int, dtype: str, conf_head_scale: float = 1.0, zero_biases: bool = False):
    """The seeded reference; a scenario may scale the classification head (large logits) or zero every bias
    (torchvision's own init: then an all-zero image stays exactly zero through the network)."""
    model = build_reference(get_config(config), seed, TORCH_DTYPES[np.dtype(dtype)])
    with torch.no_grad():
        for param in model.head.classification_head.parameters():
            param.mul_(conf_head_scale)
        if zero_biases:
            for name, param in model.named_parameters():
                if name.endswith(".bias"):
                    param.zero_()
    return model


@lru_cache(maxsize=8)
def native_model(config: str, seed: int, dtype: str, conf_head_scale: float = 1.0, zero_biases: bool = False):
    weights = state_dict_arrays(reference_model(config, seed, dtype, conf_head_scale, zero_biases))
    return NATIVE_MODELS[np.dtype(dtype)](weights)


def _models(scenario: Scenario, dtype: np.dtype):
    key = (scenario.config, scenario.weights_seed, np.dtype(dtype).name, scenario.conf_head_scale,
           scenario.zero_biases)
    return reference_model(*key), native_model(*key)


def native_model_for(scenario: Scenario, dtype=np.float32):
    return _models(scenario, dtype)[1]


def reference_model_for(scenario: Scenario, dtype=np.float32):
    return _models(scenario, dtype)[0]


def reference_forward(scenario: Scenario, images: np.ndarray) -> dict:
    model, _ = _models(scenario, images.dtype)
    with torch.no_grad():
        taps = run_forward(model, torch.from_numpy(images))
    return {name: t.detach().numpy().copy() for name, t in taps.items()}


def native_forward(scenario: Scenario, images: np.ndarray) -> dict:
    return _models(scenario, images.dtype)[1].forward(images)


def _torch_targets(targets: list, dtype: np.dtype) -> tuple:
    boxes = [torch.from_numpy(b.astype(dtype)) for b, _ in targets]
    labels = [torch.from_numpy(l) for _, l in targets]
    return boxes, labels


def reference_step(scenario: Scenario, images: np.ndarray, targets: list, routing: dict | None = None) -> dict:
    """The scenario's training step(s) on the reference; the last step's trace."""
    model, _ = _models(scenario, images.dtype)
    boxes, labels = _torch_targets(targets, images.dtype)
    for _ in range(scenario.steps):
        taps = run_step(model, torch.from_numpy(images), boxes, labels, routing)
    return {name: t.numpy().copy() for name, t in taps.items()}


def native_step(scenario: Scenario, images: np.ndarray, targets: list) -> dict:
    """The scenario's training step(s) on the native model; the last step's trace."""
    _, model = _models(scenario, images.dtype)
    boxes = [np.ascontiguousarray(b, dtype=images.dtype) for b, _ in targets]
    for _ in range(scenario.steps):
        trace = model.forward_backward(images, boxes, [l for _, l in targets])
    return trace


def release_memory() -> None:
    """Hand freed memory back to the system after a large case (glibc keeps freed blocks otherwise)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


@dataclass
class SideTraces:
    """One scenario run on every side; each trace maps tap name -> array, in execution order."""

    scenario: Scenario
    reference: dict  # torch float32
    oracle: dict  # torch float64, the yardstick for both float32 sides
    native: dict  # C++ float32
    native64: dict | None  # C++ float64, held to the oracle at near machine precision (None for a dump)
    oracle_for_native64: dict | None = None  # the oracle with native64's routing ties replayed, if it had any
    routing_ties: dict = field(default_factory=dict)  # tap -> count of near-tied decisions routed as the native side did
    routing: dict = field(default_factory=dict)  # tap -> the replay entry itself (reference/routing.py)

    @property
    def strict_oracle(self) -> dict:
        return self.oracle_for_native64 if self.oracle_for_native64 is not None else self.oracle


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
    traces = SideTraces(
        scenario=scenario,
        reference=reference_step(scenario, images, targets),
        oracle=reference_step(scenario, images64, targets),
        native=native if external else native_step(scenario, images, targets),
        native64=None if external else native_step(scenario, images64, targets),
    )
    # Near-tied decisions (pool windows, ReLUs, mining) the native side took differently: replay the reference
    # with the native decision there, so gradients upstream compare like for like; the ties are reported.
    model, _ = _models(scenario, np.float32)
    plain_oracle = traces.oracle

    def replay32(routing):
        return reference_step(scenario, images, targets, routing), reference_step(scenario, images64, targets, routing)

    routing, (traces.reference, traces.oracle) = reconcile(
        model, traces.native, (traces.reference, traces.oracle), replay32)
    traces.routing, traces.routing_ties = routing, tie_counts(routing)
    if traces.native64 is not None:
        _, (traces.oracle_for_native64,) = reconcile(
            model, traces.native64, (plain_oracle,), lambda r: (reference_step(scenario, images64, targets, r),))
    return traces

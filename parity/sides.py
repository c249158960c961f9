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

from .routing_ties import find_routing_ties, merge_routing, tie_counts
from .scenario import Scenario

NATIVE_MODELS = {np.dtype(np.float32): ssd_native.ModelFloat32, np.dtype(np.float64): ssd_native.ModelFloat64}
MAX_REPLAYS = 4
TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}


@lru_cache(maxsize=8)
def reference_model(config: str, seed: int, dtype: str):
    return build_reference(get_config(config), seed, TORCH_DTYPES[np.dtype(dtype)])


@lru_cache(maxsize=8)
def native_model(config: str, seed: int, dtype: str):
    weights = state_dict_arrays(reference_model(config, seed, dtype))
    return NATIVE_MODELS[np.dtype(dtype)](weights)


def reference_forward(scenario: Scenario, images: np.ndarray) -> dict:
    model = reference_model(scenario.config, scenario.weights_seed, images.dtype.name)
    with torch.no_grad():
        taps = run_forward(model, torch.from_numpy(images))
    return {name: t.detach().numpy().copy() for name, t in taps.items()}


def native_forward(scenario: Scenario, images: np.ndarray) -> dict:
    return native_model(scenario.config, scenario.weights_seed, images.dtype.name).forward(images)


def _torch_targets(targets: list, dtype: np.dtype) -> tuple:
    boxes = [torch.from_numpy(b.astype(dtype)) for b, _ in targets]
    labels = [torch.from_numpy(l) for _, l in targets]
    return boxes, labels


def reference_step(scenario: Scenario, images: np.ndarray, targets: list, routing: dict | None = None) -> dict:
    model = reference_model(scenario.config, scenario.weights_seed, images.dtype.name)
    boxes, labels = _torch_targets(targets, images.dtype)
    taps = run_step(model, torch.from_numpy(images), boxes, labels, routing)
    return {name: t.numpy().copy() for name, t in taps.items()}


def native_step(scenario: Scenario, images: np.ndarray, targets: list) -> dict:
    model = native_model(scenario.config, scenario.weights_seed, images.dtype.name)
    boxes = [np.ascontiguousarray(b, dtype=images.dtype) for b, _ in targets]
    return model.forward_backward(images, boxes, [l for _, l in targets])


@dataclass
class SideTraces:
    """One scenario run on every side; each trace maps tap name -> array, in execution order."""

    scenario: Scenario
    reference: dict  # torch float32
    oracle: dict  # torch float64, the yardstick for both float32 sides
    native: dict  # C++ float32
    native64: dict  # C++ float64, held to the oracle at near machine precision
    oracle_for_native64: dict | None = None  # the oracle with native64's routing ties replayed, if it had any
    routing_ties: dict = field(default_factory=dict)  # pool tap -> near-tied windows routed as the native side did

    @property
    def strict_oracle(self) -> dict:
        return self.oracle_for_native64 if self.oracle_for_native64 is not None else self.oracle


def run_sides(scenario: Scenario, step: bool = True) -> SideTraces:
    """The scenario on all four sides: the whole training step (forward, loss, backward), or forward alone."""
    images = scenario.images()
    images64 = images.astype(np.float64)
    if not step:
        return SideTraces(scenario, reference_forward(scenario, images), reference_forward(scenario, images64),
                          native_forward(scenario, images), native_forward(scenario, images64))
    targets = scenario.targets()
    traces = SideTraces(
        scenario=scenario,
        reference=reference_step(scenario, images, targets),
        oracle=reference_step(scenario, images64, targets),
        native=native_step(scenario, images, targets),
        native64=native_step(scenario, images64, targets),
    )
    # Near-tied pooling windows routed differently by the native side: replay the reference (and the oracle)
    # with the native choice there, so gradients upstream compare like for like; the ties are reported.
    model = reference_model(scenario.config, scenario.weights_seed, "float32")
    plain_oracle, routing = traces.oracle, {}
    for _ in range(MAX_REPLAYS):
        # A replay moves values downstream by rounding, which can expose further near-ties: repeat until none.
        found = find_routing_ties(model, traces.native, traces.reference, traces.oracle)
        if not found:
            break
        routing = merge_routing(routing, found)
        traces.reference = reference_step(scenario, images, targets, routing)
        traces.oracle = reference_step(scenario, images64, targets, routing)
    traces.routing_ties = tie_counts(routing)
    routing64 = find_routing_ties(model, traces.native64, plain_oracle, plain_oracle)
    traces.oracle_for_native64 = (
        reference_step(scenario, images64, targets, routing64) if routing64 else plain_oracle
    )
    return traces

"""The two sides of a parity run: the torchvision reference (float32, and float64 as the oracle) and the native
C++ model (float32, and float64 for the strict check), built from the same seeded weights."""

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

import ssd_native
from reference.configs import get_config
from reference.model import build_reference, state_dict_arrays
from reference.taps import run_forward

from .scenario import Scenario

NATIVE_MODELS = {np.dtype(np.float32): ssd_native.ModelFloat32, np.dtype(np.float64): ssd_native.ModelFloat64}
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


@dataclass
class SideTraces:
    """One scenario run on every side; each trace maps tap name -> array, in execution order."""

    scenario: Scenario
    reference: dict  # torch float32
    oracle: dict  # torch float64, the yardstick for both float32 sides
    native: dict  # C++ float32
    native64: dict  # C++ float64, held to the oracle at near machine precision


def run_sides(scenario: Scenario) -> SideTraces:
    images = scenario.images()
    images64 = images.astype(np.float64)
    return SideTraces(
        scenario=scenario,
        reference=reference_forward(scenario, images),
        oracle=reference_forward(scenario, images64),
        native=native_forward(scenario, images),
        native64=native_forward(scenario, images64),
    )

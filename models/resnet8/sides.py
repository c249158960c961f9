"""ResNet-8's scenario on every side: the native float32 and float64 builds, the reference in float32 and its
float64 oracle, each taking one training step from the same weights; then every tensor compared by the core
(parity/core/compare.py) under the error model's bounds (error_model.py)."""

from dataclasses import dataclass

import numpy as np
import torch

from parity.core.compare import compare_traces

from .error_model import ResNet8ErrorModel
from .reference import SgdSettings, build_reference, state_dict_arrays, training_step
from .scenarios import Scenario
from .spec import RULES

SGD = SgdSettings()


@dataclass
class ResNet8Traces:
    scenario: Scenario
    native: dict
    reference: dict
    oracle: dict
    native64: dict
    weights: dict  # the float64 state_dict every side started from
    model: torch.nn.Module  # the float64 reference (geometry for the bounds)


def _native_step(model_class, weights: dict, images: np.ndarray, labels: np.ndarray) -> dict:
    import resnet8_native

    model = getattr(resnet8_native, model_class)(weights)
    trace = model.train_step(images, labels, SGD.lr, SGD.momentum, SGD.weight_decay)
    return {name: np.asarray(value) for name, value in trace.items()}  # the batch counters come as Python ints


def run_sides(scenario: Scenario) -> ResNet8Traces:
    images, labels = scenario.images(), scenario.labels()
    reference_model = build_reference(scenario.seed)
    native = _native_step("ModelFloat32", state_dict_arrays(reference_model), images, labels)
    reference = training_step(reference_model, torch.from_numpy(images), torch.from_numpy(labels), SGD)
    oracle_model = build_reference(scenario.seed, torch.float64)
    weights = state_dict_arrays(oracle_model)
    images64 = images.astype(np.float64)
    native64 = _native_step("ModelFloat64", weights, images64, labels)
    oracle = training_step(oracle_model, torch.from_numpy(images64), torch.from_numpy(labels), SGD)
    return ResNet8Traces(scenario, native, reference, oracle, native64, weights, build_reference(scenario.seed,
                                                                                                 torch.float64))


def run_case(scenario: Scenario, inspect=None) -> list:
    """-> a TensorResult per tensor of the step, in the reference's order. inspect(traces, results), if given, is
    called while the traces are still held (the CLI's pictures of a failure)."""
    traces = run_sides(scenario)
    bounds = ResNet8ErrorModel(traces.model, traces.weights, traces.oracle, scenario.images(), scenario.labels(), SGD)
    results = compare_traces(RULES, scenario.id, scenario.batch_size, traces.native, traces.reference, traces.oracle,
                             native64=traces.native64, error_model=bounds)
    if inspect is not None:
        inspect(traces, results)
    return results

"""The step's data-flow graph, read from the reference model: which stage produces each forward tap, from which
taps, with which module; and, inverted, which stages consume each tap (what its gradient is summed from)."""

from dataclasses import dataclass

from torch import nn

from reference.routing import POOL_INPUTS
from reference.step import tap_parameters
from reference.taps import FORWARD_TAPS, module_taps, stage_inputs


@dataclass(frozen=True)
class Stage:
    tap: str  # the tap it produces
    kind: str  # "conv", "pool", "l2norm", "join" or "priors"
    inputs: tuple  # the taps it reads ("input": the image batch)
    module: nn.Module | None = None  # the Conv2d or MaxPool2d
    relu: bool = False  # a conv whose tap is its output after ReLU
    weight_key: str | None = None  # state_dict keys of its parameters
    bias_key: str | None = None


def build_stages(model) -> dict:
    """tap -> Stage, in FORWARD_TAPS order."""
    by_tap = {tap: module for module, tap in module_taps(model).items()}
    params = tap_parameters(model)
    stages = {}
    for tap in FORWARD_TAPS:
        inputs = tuple(stage_inputs(tap))
        if tap == "priors":
            stages[tap] = Stage(tap, "priors", inputs)
        elif tap in ("loc_head", "conf_head"):
            stages[tap] = Stage(tap, "join", inputs)
        elif tap == "backbone.conv4_3_l2norm":
            stages[tap] = Stage(tap, "l2norm", inputs, weight_key="backbone.scale_weight")
        elif tap in POOL_INPUTS:
            stages[tap] = Stage(tap, "pool", inputs, by_tap[tap])
        else:
            weight_key, bias_key = params[tap]
            conv = model.get_submodule(weight_key.removesuffix(".weight"))
            stages[tap] = Stage(tap, "conv", inputs, conv, isinstance(by_tap[tap], nn.ReLU), weight_key, bias_key)
    return stages


def consumers(stages: dict) -> dict:
    """tap -> the stages that read it, in execution order (loc_head and conf_head are read by the loss)."""
    readers = {tap: [] for tap in stages}
    for stage in stages.values():
        for tap in stage.inputs:
            if tap != "input":
                readers[tap].append(stage)
    return readers


def producer_of_parameter(stages: dict) -> dict:
    """state_dict key -> (stage, "weight" or "bias")."""
    owners = {}
    for stage in stages.values():
        if stage.weight_key:
            owners[stage.weight_key] = (stage, "weight")
        if stage.bias_key:
            owners[stage.bias_key] = (stage, "bias")
    return owners

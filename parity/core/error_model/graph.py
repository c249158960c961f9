"""A step's data-flow graph as a model's spec gives it: which stage produces each forward tap, from which taps,
with which module; and, inverted, which stages consume each tap (what its gradient is summed from)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    tap: str  # the tap it produces
    kind: str  # what the model's error model bounds it as: "conv", "pool", "l2norm", "join", ...
    inputs: tuple  # the taps it reads ("input": the image batch)
    module: object = None  # the torch module whose geometry it has (a Conv2d, a MaxPool2d), if any
    relu: bool = False  # a conv whose tap is its output after ReLU
    weight_key: str | None = None  # state_dict keys of its parameters
    bias_key: str | None = None


def consumers(stages: dict) -> dict:
    """tap -> the stages that read it, in execution order (a tap no stage reads, a network output, gets none)."""
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

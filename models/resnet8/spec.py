"""ResNet-8's stages as the harness reads them: each forward tap with its kind, the taps it reads and the module
whose parameters it uses, in execution order (the data-flow graph the bounds follow); which stages read each tap
(what its gradient is summed from); what an index of each tensor means; and the tensor rules the core judges by
(parity/core/rules.py): BatchNorm's step counters are exact integers, the loss is a scalar."""

from dataclasses import dataclass

from parity.core.error_model.graph import consumers as graph_consumers
from parity.core.rules import TensorRules

from .reference import WIDTHS


@dataclass(frozen=True)
class Stage:
    tap: str
    kind: str  # "conv", "batchnorm", "relu", "add", "avgpool" or "linear"
    inputs: tuple  # the taps it reads ("input": the image batch)
    module: str | None = None  # the module path of its parameters (its state_dict prefix)


def build_stages() -> dict:
    """tap -> Stage, in execution order (models/resnet8/reference.py forward_taps, native/resnet8/resnet8_model.h)."""
    stages = [Stage("conv1", "conv", ("input",), "conv1"), Stage("bn1", "batchnorm", ("conv1",), "bn1"),
              Stage("relu", "relu", ("bn1",))]
    x, channels = "relu", WIDTHS[0]
    for number, width in enumerate(WIDTHS, 1):
        p = f"layer{number}.0"
        stages += [Stage(f"{p}.conv1", "conv", (x,), f"{p}.conv1"),
                   Stage(f"{p}.bn1", "batchnorm", (f"{p}.conv1",), f"{p}.bn1"),
                   Stage(f"{p}.relu1", "relu", (f"{p}.bn1",)),
                   Stage(f"{p}.conv2", "conv", (f"{p}.relu1",), f"{p}.conv2"),
                   Stage(f"{p}.bn2", "batchnorm", (f"{p}.conv2",), f"{p}.bn2")]
        identity = x
        if width != channels:
            stages += [Stage(f"{p}.downsample.0", "conv", (x,), f"{p}.downsample.0"),
                       Stage(f"{p}.downsample.1", "batchnorm", (f"{p}.downsample.0",), f"{p}.downsample.1")]
            identity = f"{p}.downsample.1"
        stages += [Stage(f"{p}.add", "add", (f"{p}.bn2", identity)), Stage(f"{p}.out", "relu", (f"{p}.add",))]
        x, channels = f"{p}.out", width
    stages += [Stage("avgpool", "avgpool", (x,)), Stage("fc", "linear", ("avgpool",), "fc")]
    return {stage.tap: stage for stage in stages}


STAGES = build_stages()
FORWARD_TAPS = list(STAGES)


def consumers(stages: dict = STAGES) -> dict:
    """tap -> the stages that read it, in execution order (the core's graph walk, on this model's stages)."""
    return graph_consumers(stages)


def index_meaning(name: str, shape: tuple) -> tuple:
    """The names of a tensor's dimensions: a feature map's (image, channel, y, x), the classifier's (image, class),
    a parameter's by its own shape."""
    if name.startswith(("param", "momentum/", "buffer/")):
        return ("output", "input", "ky", "kx")[:len(shape)] if len(shape) > 1 else ("channel",)[:len(shape)]
    if len(shape) == 4:
        return ("image", "channel", "y", "x")
    if len(shape) == 2:
        return ("image", "feature" if name.endswith("avgpool") else "class")
    return ()


def _meaning(name: str, shape: tuple, index: tuple) -> dict:
    dims = index_meaning(name, shape)
    if len(dims) != len(index):
        return {f"dim{i}": int(v) for i, v in enumerate(index)}
    return {dim: int(v) for dim, v in zip(dims, index)}


RULES = TensorRules(index_suffixes=("num_batches_tracked",), scalars=frozenset({"loss"}), decode=_meaning)

"""The model configurations the harness knows: the full SSD300 and a narrow one with the same topology.

The narrow config keeps the 300x300 input, every layer, stride and padding, and so all 8732 priors, but has
1/8 of the channels: the same code paths at a fraction of the cost, for broad sweeps.
"""

from dataclasses import dataclass

IMAGE_SIZE = 300
# Per source map: spatial size and anchors per location (torchvision's DefaultBoxGenerator for SSD300).
SOURCE_SIZES = (38, 19, 10, 5, 3, 1)
ANCHORS_PER_LOCATION = (4, 6, 6, 6, 4, 4)
NUM_PRIORS = sum(s * s * a for s, a in zip(SOURCE_SIZES, ANCHORS_PER_LOCATION))


@dataclass(frozen=True)
class ModelConfig:
    name: str
    width_divisor: int  # every channel count of SSD300 divided by this (the RGB input excepted)
    num_classes: int  # including background


CONFIGS = {
    "ssd300": ModelConfig("ssd300", width_divisor=1, num_classes=21),
    "narrow": ModelConfig("narrow", width_divisor=8, num_classes=21),
}


def get_config(name: str) -> ModelConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown config {name!r}; known configs: {', '.join(CONFIGS)}") from None

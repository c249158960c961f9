"""ResNet-8's scenarios: a batch of 32x32 images and their labels, built from a name, a batch size and a seed.
Each provokes something BatchNorm ports get wrong:

- random: images of unit variance, every label;
- offset: images with a mean 30 times their spread, so each channel's variance is a small difference of large
  sums (a one-pass variance loses it; eps is then small against it);
- zero_image: the first image all zeros, so at batch 1 the first BatchNorm sees a channel of one value (variance
  0: eps alone keeps the division finite) and the first layer's ReLUs sit exactly at 0."""

from dataclasses import dataclass

import numpy as np

from .reference import IMAGE_SIZE, NUM_CLASSES

KINDS = ("random", "offset", "zero_image")
BATCH_SIZES = (1, 2, 8)  # BatchNorm makes batch size matter: one image, two, a typical small batch


@dataclass(frozen=True)
class Scenario:
    kind: str
    batch_size: int
    seed: int = 0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown ResNet-8 scenario {self.kind!r}; known: {', '.join(KINDS)}")
        if self.batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {self.batch_size}")

    @property
    def id(self) -> str:
        return f"resnet8-{self.kind}-B{self.batch_size}"

    def images(self) -> np.ndarray:
        """(B,3,32,32) float32."""
        rng = np.random.default_rng(self.seed)
        images = rng.standard_normal((self.batch_size, 3, IMAGE_SIZE, IMAGE_SIZE)).astype(np.float32)
        if self.kind == "offset":
            images = (30 + images).astype(np.float32)
        elif self.kind == "zero_image":
            images[0] = 0
        return images

    def labels(self) -> np.ndarray:
        """(B,) int64, every class in turn from a seeded start."""
        start = int(np.random.default_rng(self.seed + 1).integers(NUM_CLASSES))
        return (start + np.arange(self.batch_size, dtype=np.int64) * 3) % NUM_CLASSES


def all_scenarios() -> list:
    return [Scenario(kind, b) for kind in KINDS for b in BATCH_SIZES]


def load_scenarios(name: str, batch_sizes: list | None = None) -> list:
    """A kind ("default": every kind) at the given batch sizes (default: 1, 2 and 8)."""
    kinds = KINDS if name == "default" else (name,)
    return [Scenario(kind, b) for kind in kinds for b in (batch_sizes or BATCH_SIZES)]

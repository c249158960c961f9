"""Scenarios: everything one parity run needs, as data (fixtures/scenarios/*.json) or generated.

A scenario names the model config, weights seed, batch size and how its images and targets are made.
"""

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from reference.configs import get_config

from .scenes import make_scene, normalize

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "scenarios"
DEFAULT_SCENARIO = "default"


@dataclass(frozen=True)
class Scenario:
    name: str
    config: str  # a key of reference.configs.CONFIGS
    batch_size: int
    weights_seed: int = 0
    image_seed: int = 1
    max_objects: int = 5
    image_mode: str = "scene"  # "scene" (shapes on texture) or "zeros" (an all-zero network input)
    zero_images: tuple = field(default=())  # indices of images replaced by an all-zero network input

    def __post_init__(self):
        get_config(self.config)
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"scenario {self.name!r}: batch_size must be an int >= 1, got {self.batch_size!r}")

    @property
    def id(self) -> str:
        suffix = "" if self.name in (DEFAULT_SCENARIO, self.config) else f"-{self.name}"
        return f"{self.config}-B{self.batch_size}{suffix}"

    def with_batch(self, batch_size: int) -> "Scenario":
        return replace(self, batch_size=batch_size)

    def images(self) -> np.ndarray:
        """(B,3,300,300) float32, normalized as torchvision's SSD transform does."""
        scenes = [make_scene(self.image_seed, i, self.max_objects) for i in range(self.batch_size)]
        batch = normalize(np.stack([s.image for s in scenes]))
        for i in self.zero_images:
            if i < self.batch_size:
                batch[i] = 0.0
        return batch

    def targets(self) -> list:
        """Per image: (boxes (n,4) float32 pixels, labels (n,) int64)."""
        scenes = [make_scene(self.image_seed, i, self.max_objects) for i in range(self.batch_size)]
        return [(s.boxes, s.labels) for s in scenes]


def load_scenarios(name: str, batch_sizes: list | None = None) -> list:
    """The scenario fixture `name`, one Scenario per batch size (the fixture's own list unless given)."""
    path = SCENARIO_DIR / f"{name}.json"
    if not path.is_file():
        known = sorted(p.stem for p in SCENARIO_DIR.glob("*.json"))
        raise ValueError(f"unknown scenario {name!r}; known scenarios: {', '.join(known)}")
    data = json.loads(path.read_text())
    data.pop("description", None)
    sizes = batch_sizes or data.pop("batch_sizes")
    data.pop("batch_sizes", None)
    if "zero_images" in data:
        data["zero_images"] = tuple(data["zero_images"])
    return [Scenario(name=name, batch_size=int(b), **data) for b in sizes]

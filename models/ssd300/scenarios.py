"""Scenarios: everything one parity run needs, as data (fixtures/scenarios/*.json) or generated.

A scenario names the model config, weights seed, batch size and how its images and targets are made.
"""

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .reference.configs import get_config
from .scenes import make_scene, normalize

SCENARIO_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "scenarios"
DEFAULT_SCENARIO = "default"


@dataclass(frozen=True)
class Scenario:
    name: str
    config: str  # a key of reference.configs.CONFIGS (models/ssd300/reference/configs.py)
    batch_size: int
    weights_seed: int = 0
    image_seed: int = 1
    image_specs: tuple = ()  # one spec per image, cycled (models/ssd300/scenes.py DEFAULT_SPEC); () = all default
    conf_head_scale: float = 1.0  # the classification head's weights and bias scaled by this (large logits)
    zero_biases: bool = False  # every bias 0 (torchvision's init), so an all-zero image stays exactly 0
    # Training steps run back to back on the same batch, without an update; the last one is compared. Every step
    # is then the same computation, so a side that carries state into the next step (gradients never zeroed)
    # differs from the second step on.
    steps: int = 1

    def __post_init__(self):
        get_config(self.config)
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"scenario {self.name!r}: batch_size must be an int >= 1, got {self.batch_size!r}")
        if not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"scenario {self.name!r}: steps must be an int >= 1, got {self.steps!r}")

    @property
    def id(self) -> str:
        suffix = "" if self.name in (DEFAULT_SCENARIO, self.config) else f"-{self.name}"
        return f"{self.config}-B{self.batch_size}{suffix}"

    def with_batch(self, batch_size: int) -> "Scenario":
        return replace(self, batch_size=batch_size)

    def spec(self, index: int) -> dict:
        return dict(self.image_specs[index % len(self.image_specs)]) if self.image_specs else {}

    def _scenes(self) -> list:
        return [make_scene(self.image_seed, i, self.spec(i)) for i in range(self.batch_size)]

    def images(self) -> np.ndarray:
        """(B,3,300,300) float32, normalized as torchvision's SSD transform does; an image whose spec says
        "zero_input" is an all-zero network input (L2Norm then sees all-zero vectors)."""
        batch = normalize(np.stack([s.image for s in self._scenes()]))
        for i in range(self.batch_size):
            if self.spec(i).get("zero_input"):
                batch[i] = 0.0
        return batch

    def targets(self) -> list:
        """Per image: (boxes (n,4) float32 pixels, labels (n,) int64); an "empty" spec has no boxes, a
        "decision_boundaries" spec adds the boxes that sit on the matcher's boundaries (models/ssd300/boundary_boxes.py)
        after its own."""
        targets = []
        for i, scene in enumerate(self._scenes()):
            if self.spec(i).get("empty"):
                targets.append((np.zeros((0, 4), np.float32), np.zeros(0, np.int64)))
            elif self.spec(i).get("decision_boundaries"):
                from .boundary_boxes import boundary_boxes

                extra = boundary_boxes().boxes
                labels = np.arange(len(extra), dtype=np.int64) % 3 + 1
                targets.append((np.concatenate([scene.boxes, extra]).astype(np.float32),
                                np.concatenate([scene.labels, labels])))
            else:
                targets.append((scene.boxes, scene.labels))
        return targets


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
    data["image_specs"] = tuple(data.get("image_specs", ()))
    return [Scenario(name=name, batch_size=int(b), **data) for b in sizes]

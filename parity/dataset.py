"""A small real task for training parity: a synthetic detection dataset generated from a seed (coloured
rectangles, ellipses and triangles, 3 classes, on textured backgrounds; boxes known exactly), split into train and
validation, served in the same batches in the same order to both sides.

Item i depends only on (seed, i). fixtures/dataset/ holds a sample of it with checksums, so a change in the
generator (or in numpy's random streams) is noticed rather than silently training on other data."""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.ssd300.scenes import SHAPE_CLASSES, make_scene, normalize

SAMPLE_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "dataset"
ITEM_SPEC = {"objects": [1, 4], "box_size": [30, 220]}


@dataclass(frozen=True)
class SyntheticDetection:
    seed: int
    train_size: int
    val_size: int

    num_classes = len(SHAPE_CLASSES)  # labels 1..3, 0 is background

    def __post_init__(self):
        if self.train_size < 1 or self.val_size < 1:
            raise ValueError(f"the dataset needs train_size >= 1 and val_size >= 1, got {self.train_size}, {self.val_size}")

    def item(self, index: int):
        """-> the scene of item `index` (train items first, then validation): image (3,300,300) in [0,1], boxes, labels."""
        return make_scene(self.seed, index, ITEM_SPEC)

    def batch(self, indices: list) -> tuple:
        """-> (normalized images (B,3,300,300) float32, [(boxes, labels)] per image)"""
        scenes = [self.item(i) for i in indices]
        return normalize(np.stack([s.image for s in scenes])), [(s.boxes, s.labels) for s in scenes]

    @property
    def train_indices(self) -> list:
        return list(range(self.train_size))

    @property
    def val_indices(self) -> list:
        return list(range(self.train_size, self.train_size + self.val_size))

    def epoch_batches(self, epoch: int, batch_size: int) -> list:
        """The train items of one epoch in batches: a permutation seeded by (seed, epoch); a short last batch is kept."""
        order = np.random.default_rng([self.seed, epoch]).permutation(self.train_indices)
        return [order[i:i + batch_size].tolist() for i in range(0, len(order), batch_size)]


def item_checksum(scene) -> str:
    """sha256 over the exact float32 image bytes, the boxes and the labels."""
    digest = hashlib.sha256()
    for array in (scene.image, scene.boxes, scene.labels):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def write_sample(directory: Path = SAMPLE_DIR, seed: int = 0, count: int = 3) -> Path:
    """A sample of the dataset as the fixtures hold it: each image as a PNG to look at, and manifest.json with the
    boxes, labels and checksum of each item."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    dataset = SyntheticDetection(seed, count, 1)
    items = []
    for index in range(count):
        scene = dataset.item(index)
        plt.imsave(directory / f"item{index}.png", scene.image.transpose(1, 2, 0))
        items.append({"index": index, "boxes": scene.boxes.tolist(), "labels": scene.labels.tolist(),
                      "sha256": item_checksum(scene)})
    manifest = {"seed": seed, "spec": ITEM_SPEC, "items": items}
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return directory


if __name__ == "__main__":
    print(write_sample())

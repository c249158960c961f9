"""Synthetic detection scenes from a seed: coloured shapes on textured backgrounds, boxes known exactly.

Image i of a scene set depends only on (seed, i), so a batch of B is the first B images of a batch of 8: sample i
of a batch run can be compared with its run alone.
"""

from dataclasses import dataclass

import numpy as np

from .reference.configs import IMAGE_SIZE

SHAPE_CLASSES = ("rectangle", "ellipse", "triangle")  # labels 1, 2, 3; 0 is background
# torchvision's SSD300 transform: normalize with this mean and std = 1/255 (ssd300_vgg16's GeneralizedRCNNTransform).
TORCHVISION_MEAN = np.array([0.48235, 0.45882, 0.40784], dtype=np.float32)
TORCHVISION_STD = np.array([1.0 / 255.0] * 3, dtype=np.float32)


@dataclass
class Scene:
    image: np.ndarray  # (3, S, S) float32 RGB in [0, 1]
    boxes: np.ndarray  # (n, 4) float32 (x1, y1, x2, y2) pixels
    labels: np.ndarray  # (n,) int64 in 1..len(SHAPE_CLASSES)


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    image = np.empty((3, size, size), np.float32)
    for c in range(3):
        fy, fx, phase = rng.uniform(0.5, 6.0), rng.uniform(0.5, 6.0), rng.uniform(0, 2 * np.pi)
        wave = np.sin(2 * np.pi * (fy * yy + fx * xx) + phase)
        image[c] = rng.uniform(0.3, 0.7) + 0.15 * wave + rng.normal(0.0, 0.04, (size, size))
    return image


def _shape_mask(kind: str, box: np.ndarray, size: int) -> np.ndarray:
    x1, y1, x2, y2 = box
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    inside = (xx >= x1) & (xx <= x2) & (yy >= y1) & (yy <= y2)
    if kind == "ellipse":
        cx, cy, rx, ry = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2, (y2 - y1) / 2
        return ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1.0
    if kind == "triangle":  # apex at the top centre, base along the bottom edge
        frac = (yy - y1) / max(y2 - y1, 1e-6)
        half = frac * (x2 - x1) / 2
        return inside & (np.abs(xx - (x1 + x2) / 2) <= half)
    return inside


# What an image holds; a scenario lists one spec per image (cycled over the batch).
DEFAULT_SPEC = {
    "objects": [1, 10],  # how many shapes, inclusive range
    "box_size": [20, 280],  # width and height in pixels, drawn independently (large ones match the 3x3 and 1x1 maps)
    "border": False,  # every box touches an image border
    "shared_prior_pair": False,  # add a near-copy of the first box (shifted 1 px): both GTs share a best prior
}


def _place(rng, w, h, size, border: bool):
    x1, y1 = rng.uniform(0, size - w), rng.uniform(0, size - h)
    if border:  # snap to one of the four borders
        side = int(rng.integers(0, 4))
        x1 = 0.0 if side == 0 else (size - w if side == 1 else x1)
        y1 = 0.0 if side == 2 else (size - h if side == 3 else y1)
    return np.array([x1, y1, x1 + w, y1 + h], np.float32)


def make_scene(seed: int, index: int, spec: dict | None = None, size: int = IMAGE_SIZE) -> Scene:
    if spec and "photo" in spec:  # a photograph and its boxes from fixtures/photos (models/ssd300/photos.py)
        from .photos import photo_scene

        return photo_scene(spec["photo"], size=size)
    spec = {**DEFAULT_SPEC, **(spec or {})}
    rng = np.random.default_rng([seed, index])
    image = _background(rng, size)
    count = int(rng.integers(spec["objects"][0], spec["objects"][1] + 1))
    boxes, labels = [], []
    for _ in range(count):
        w, h = rng.uniform(*spec["box_size"], size=2)
        box = _place(rng, w, h, size, spec["border"])
        label = int(rng.integers(0, len(SHAPE_CLASSES)))
        colour = rng.uniform(0, 1, size=3).astype(np.float32)
        image[:, _shape_mask(SHAPE_CLASSES[label], box, size)] = colour[:, None]
        boxes.append(box)
        labels.append(label + 1)
    if spec["shared_prior_pair"] and boxes:
        twin = boxes[0] + np.float32(1.0)
        twin[2:] = np.minimum(twin[2:], size)
        boxes.append(twin)
        labels.append(labels[0] % len(SHAPE_CLASSES) + 1)
    return Scene(np.clip(image, 0, 1), np.array(boxes, np.float32).reshape(-1, 4), np.array(labels, np.int64))


def normalize(images01: np.ndarray) -> np.ndarray:
    """(B,3,S,S) in [0,1] -> the network input, as torchvision's transform computes it in float32."""
    mean = TORCHVISION_MEAN[None, :, None, None]
    std = TORCHVISION_STD[None, :, None, None]
    return np.ascontiguousarray((images01.astype(np.float32) - mean) / std, dtype=np.float32)

"""Real images: photographs read from files and their boxes from a COCO-style JSON, resized and normalized as
torchvision's SSD transform does (fixtures/photos/ holds three, with hand-placed boxes).

torchvision's GeneralizedRCNNTransform for SSD300 resizes each image to exactly 300x300, bilinear on [0, 1]
values (torch.nn.functional.interpolate, align_corners=False), and scales its boxes by the same ratios per axis;
normalization (scenes.normalize) follows."""

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from .scenes import IMAGE_SIZE, Scene

PHOTO_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "photos"
ANNOTATIONS = PHOTO_DIR / "annotations.json"


@lru_cache(maxsize=None)
def _annotations(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def photo_scene(file_name: str, annotations: Path = ANNOTATIONS, size: int = IMAGE_SIZE) -> Scene:
    """The photo `file_name` of a COCO-style annotation file (images, annotations with bbox [x, y, w, h] in pixels,
    category_id >= 1), as the network sees it: (3, size, size) in [0, 1], boxes xyxy in the resized pixels."""
    data = _annotations(Path(annotations))
    entry = next((i for i in data["images"] if i["file_name"] == file_name), None)
    if entry is None:
        known = ", ".join(i["file_name"] for i in data["images"])
        raise ValueError(f"{annotations}: no image {file_name!r}; it lists {known}")
    path = Path(annotations).parent / file_name
    with Image.open(path) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
    height, width = pixels.shape[:2]
    if (width, height) != (entry["width"], entry["height"]):
        raise ValueError(f"{path}: {width}x{height} pixels, the annotations say {entry['width']}x{entry['height']}")
    resized = F.interpolate(torch.from_numpy(pixels).permute(2, 0, 1)[None], size=(size, size), mode="bilinear",
                            align_corners=False)[0].numpy()
    boxes, labels = [], []
    for a in (a for a in data["annotations"] if a["image_id"] == entry["id"]):
        x, y, w, h = a["bbox"]
        boxes.append([x * size / width, y * size / height, (x + w) * size / width, (y + h) * size / height])
        labels.append(a["category_id"])
    return Scene(np.ascontiguousarray(resized, dtype=np.float32), np.array(boxes, np.float32).reshape(-1, 4),
                 np.array(labels, np.int64))

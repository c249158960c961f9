"""Ground-truth boxes built to sit exactly on the matcher's decision boundaries, found against the priors as
torchvision computes them (float32, box_iou's own operations):

- a box whose IoU with one prior is exactly the 0.5 threshold, where that prior is not the box's best prior: the
  matcher's `>=` matches it, a `>` does not;
- two boxes with exactly equal IoU (0.6) to one prior, neither having it as its best prior: the matcher takes the
  first maximum, so the prior goes to the first of the two.

A scene spec with "decision_boundaries": true adds them to its image's boxes (models/ssd300/scenarios.py)."""

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from torchvision.ops import box_iou

from .reference.configs import ANCHORS_PER_LOCATION, IMAGE_SIZE, SOURCE_SIZES

THRESHOLD = 0.5
FIRST_CANDIDATE = sum(s * s * a for s, a in zip(SOURCE_SIZES[:2], ANCHORS_PER_LOCATION[:2]))  # the 10x10 map's


@dataclass(frozen=True)
class BoundaryBoxes:
    boxes: np.ndarray  # (3,4) float32: the threshold box, then the equal-IoU pair
    threshold_prior: int  # the prior at IoU exactly 0.5 with boxes[0]
    tied_prior: int  # the prior at exactly equal IoU with boxes[1] and boxes[2]


@lru_cache(maxsize=1)
def priors() -> torch.Tensor:
    """(8732,4) float32 xyxy pixels, from torchvision's DefaultBoxGenerator as SSD300 builds it."""
    from torchvision.models.detection.image_list import ImageList

    from .sides import reference_model

    generator = reference_model("narrow", 0, "float32").anchor_generator
    features = [torch.zeros(1, 1, s, s) for s in SOURCE_SIZES]
    image = ImageList(torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE), [(IMAGE_SIZE, IMAGE_SIZE)])
    return generator(image, features)[0]


def _inside(box: torch.Tensor) -> bool:
    return bool((box >= 0).all() and (box <= IMAGE_SIZE).all() and (box[2:] > box[:2]).all())


def _threshold_box(all_priors: torch.Tensor) -> tuple:
    for p in range(FIRST_CANDIDATE, all_priors.shape[0]):
        x1, y1, x2, y2 = all_priors[p]
        box = torch.stack([x1, y1, x1 + 2 * (x2 - x1), y2])  # twice the prior's width: IoU 1/2
        if not _inside(box):
            continue
        iou = box_iou(box[None], all_priors)[0]
        if iou[p] == THRESHOLD and int(iou.argmax()) != p:
            return box, p
    raise RuntimeError("no prior gives a box at IoU exactly 0.5 in float32")


def _tied_pair(all_priors: torch.Tensor, taken: int) -> tuple:
    for p in range(FIRST_CANDIDATE, all_priors.shape[0]):
        if p == taken:
            continue
        prior = all_priors[p]
        shift = (prior[2] - prior[0]) / 4  # a quarter of the width each way: IoU 3/5 with both
        left, right = prior - torch.stack([shift, 0 * shift, shift, 0 * shift]), \
            prior + torch.stack([shift, 0 * shift, shift, 0 * shift])
        if not (_inside(left) and _inside(right)):
            continue
        iou = box_iou(torch.stack([left, right]), all_priors)
        if iou[0, p] == iou[1, p] and iou[0, p] >= THRESHOLD and int(iou[0].argmax()) != p and int(iou[1].argmax()) != p:
            return left, right, p
    raise RuntimeError("no prior gives two boxes of exactly equal IoU in float32")


@lru_cache(maxsize=1)
def boundary_boxes() -> BoundaryBoxes:
    all_priors = priors()
    box, threshold_prior = _threshold_box(all_priors)
    left, right, tied_prior = _tied_pair(all_priors, threshold_prior)
    return BoundaryBoxes(torch.stack([box, left, right]).numpy().astype(np.float32), threshold_prior, tied_prior)

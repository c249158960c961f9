"""torchvision's SSD.compute_loss, written out step by step so that every intermediate is a tap.

Same torch operations in the same order as torchvision 0.29.1 (ssd.py, _utils.py); tests/test_reference_loss.py
proves the losses equal torchvision's own compute_loss bit for bit.
"""

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torchvision.models.detection.ssd import SSD
from torchvision.ops import box_iou

LOSS_TAPS = [
    "match.matched_idx",  # [B,P] int64: GT index per prior, -1 for background
    "match.labels",  # [B,P] int64: class target per prior, 0 for background
    "targets.loc",  # [B,P,4]: encoded regression target, 0 where not matched
    "loss.cls_per_prior",  # [B,P]: cross-entropy of every prior
    "mining.negatives",  # [B,P] bool: hard negatives selected per image
    "loss.loc",
    "loss.conf",
    "loss.total",
]


def check_targets(boxes: list, labels: list, batch_size: int) -> None:
    """Degenerate boxes are rejected with torchvision's own message (SSD.forward checks this before the loss)."""
    if len(boxes) != batch_size or len(labels) != batch_size:
        raise ValueError(f"got {len(boxes)} box arrays and {len(labels)} label arrays for a batch of {batch_size} images")
    for index, image_boxes in enumerate(boxes):
        degenerate = image_boxes[:, 2:] <= image_boxes[:, :2]
        if degenerate.any():
            bad = image_boxes[torch.where(degenerate.any(dim=1))[0][0]].tolist()
            raise ValueError(
                "All bounding boxes should have positive height and width."
                f" Found invalid box {bad} for target at index {index}."
            )


def match_priors(model: SSD, boxes: torch.Tensor, priors: torch.Tensor) -> torch.Tensor:
    """boxes (M,4), priors (P,4) -> matched (P,); an image without boxes is all background (-1)."""
    if boxes.numel() == 0:
        return torch.full((priors.size(0),), -1, dtype=torch.int64)
    return model.proposal_matcher(box_iou(boxes, priors))


def run_loss(model: SSD, loc_head: torch.Tensor, conf_head: torch.Tensor, priors: torch.Tensor, boxes: list,
             labels: list, forced_negatives: tuple | None = None, forced_matches: tuple | None = None
             ) -> "OrderedDict[str, torch.Tensor]":
    """Head outputs [B,P,4], [B,P,K], priors [P,4] and per-image targets -> LOSS_TAPS, in order.

    forced_negatives: optional (negatives [B,P] bool, mask [B,P] bool) replaying another side's pick among tied
    losses (routing.py); forced_matches: optional (matched [B,P] int64, mask [B,P] bool), the same for
    priors whose match a higher-precision run decided otherwise at the IoU threshold or between equal IoUs."""
    check_targets(boxes, labels, loc_head.shape[0])
    matched = [match_priors(model, b, priors) for b in boxes]
    if forced_matches is not None:
        matched = [torch.where(mask, forced, own) for own, forced, mask in zip(matched, *forced_matches)]

    num_foreground = 0
    bbox_loss, cls_targets, regression_targets = [], [], []
    for image_boxes, image_labels, loc, matched_idxs in zip(boxes, labels, loc_head, matched):
        foreground = torch.where(matched_idxs >= 0)[0]
        foreground_matched = matched_idxs[foreground]
        num_foreground += foreground_matched.numel()
        target = model.box_coder.encode_single(image_boxes[foreground_matched], priors[foreground, :])
        bbox_loss.append(F.smooth_l1_loss(loc[foreground, :], target, reduction="sum"))
        full_target = torch.zeros_like(loc.detach())
        full_target[foreground] = target
        regression_targets.append(full_target)
        classes = torch.zeros((loc.size(0),), dtype=image_labels.dtype)
        classes[foreground] = image_labels[foreground_matched]
        cls_targets.append(classes)
    bbox_loss = torch.stack(bbox_loss)
    cls_targets = torch.stack(cls_targets)

    num_classes = conf_head.size(-1)
    cls_loss = F.cross_entropy(conf_head.view(-1, num_classes), cls_targets.view(-1), reduction="none").view(
        cls_targets.size()
    )
    foreground_idxs = cls_targets > 0
    num_negative = model.neg_to_pos_ratio * foreground_idxs.sum(1, keepdim=True)
    negative_loss = cls_loss.clone()
    negative_loss[foreground_idxs] = -float("inf")
    _, idx = negative_loss.sort(1, descending=True)
    background_idxs = idx.sort(1)[1] < num_negative
    if forced_negatives is not None:
        background_idxs = torch.where(forced_negatives[1], forced_negatives[0], background_idxs)

    normalizer = max(1, num_foreground)
    loss_loc = bbox_loss.sum() / normalizer
    loss_conf = (cls_loss[foreground_idxs].sum() + cls_loss[background_idxs].sum()) / normalizer
    values = [torch.stack(matched), cls_targets, torch.stack(regression_targets), cls_loss, background_idxs,
              loss_loc, loss_conf, loss_loc + loss_conf]
    return OrderedDict(zip(LOSS_TAPS, values))

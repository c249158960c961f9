"""Facts about one run of a scenario: does it provoke the situation it is named for?"""

import numpy as np
import torch
from torchvision.ops import box_iou

from .reference.configs import IMAGE_SIZE


def _shared_best_priors(boxes: np.ndarray, priors: np.ndarray) -> int:
    """How many GTs of an image share their best prior with an earlier GT."""
    if len(boxes) < 2:
        return 0
    best = box_iou(torch.from_numpy(boxes), torch.from_numpy(priors)).argmax(dim=1).numpy()
    return len(best) - len(np.unique(best))


def scenario_facts(scenario, reference: dict, native: dict) -> dict:
    targets = scenario.targets()
    matched = reference["match.matched_idx"]
    conv4_3 = reference["backbone.conv4_3"]
    sizes = [b[:, 2:] - b[:, :2] for b, _ in targets]
    tiny = [np.flatnonzero((s <= 12).all(axis=1)) for s in sizes]
    return {
        "positives": int((matched >= 0).sum()),
        "loss_total": {"reference": float(reference["loss.total"]), "native": float(native["loss.total"])},
        "max_abs_logit": float(np.abs(reference["conf_head"]).max()),
        "boxes_per_image": [len(b) for b, _ in targets],
        "matched_gts_per_image": [int(len(np.unique(m[m >= 0]))) for m in matched],
        "shared_best_priors": sum(_shared_best_priors(b, reference["priors"]) for b, _ in targets),
        "border_boxes": sum(int(((b[:, :2] <= 0) | (b[:, 2:] >= IMAGE_SIZE)).any(axis=1).sum()) for b, _ in targets),
        "tiny_boxes_matched": sum(int(np.isin(t, m).sum()) for t, m in zip(tiny, matched)),
        "zero_norm_pixels": int((np.abs(conv4_3).sum(axis=1) == 0).sum()),
        "nonfinite_native": int(sum(int((~np.isfinite(v)).sum()) for v in native.values() if v.dtype.kind == "f")),
        "boundary_matches": _boundary_matches(scenario, matched),
    }


def _boundary_matches(scenario, matched: np.ndarray) -> dict | None:
    """Image 0 of a decision_boundaries scenario: the GT the reference matched to the prior at IoU exactly 0.5 and to
    the prior between two equal boxes (models/ssd300/boundary_boxes.py)."""
    if not scenario.spec(0).get("decision_boundaries"):
        return None
    from .boundary_boxes import boundary_boxes

    marks = boundary_boxes()
    return {"threshold": int(matched[0, marks.threshold_prior]), "tied": int(matched[0, marks.tied_prior])}

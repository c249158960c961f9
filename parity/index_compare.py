"""Exact comparison of integer decisions (matches, labels) and tie-aware comparison of mined negatives.

Negatives are compared per image. Both sides rank background priors by their cross-entropy; where two priors'
losses are equal or closer than the loss tolerance at the selection boundary, either pick is correct (the
reference's unstable sort leaves the order of ties unspecified). A difference confined to such priors is
reported as a tie, with its count; a difference anywhere else is a failure. The selected-loss sums must agree
either way.
"""

from dataclasses import dataclass, field

import numpy as np

from .layout import decode_index

MAX_LISTED = 5


@dataclass
class IndexDiff:
    mismatches: int = 0
    ties: int = 0
    reasons: list = field(default_factory=list)
    worst: list = field(default_factory=list)


def _listing(name, shape, indices, native, reference, note=None) -> list:
    rows = []
    for flat in indices[:MAX_LISTED]:
        index = np.unravel_index(int(flat), shape)
        row = {"index": [int(i) for i in index], "meaning": decode_index(name, shape, index),
               "native": int(native.ravel()[flat]), "reference": int(reference.ravel()[flat])}
        if note is not None:
            row["note"] = note
        rows.append(row)
    return rows


def compare_exact(name: str, native: np.ndarray, reference: np.ndarray) -> IndexDiff:
    differing = np.flatnonzero(native.ravel() != reference.ravel())
    diff = IndexDiff(mismatches=int(differing.size))
    if differing.size:
        diff.reasons.append(f"{differing.size} of {native.size} entries differ (an index tensor must match exactly)")
        diff.worst = _listing(name, native.shape, differing, native, reference)
    return diff


def negative_ties(native: np.ndarray, reference: np.ndarray, losses: np.ndarray, labels: np.ndarray,
                  tolerance: float) -> np.ndarray:
    """[B,P] mask of priors selected by one side only whose ranking loss is within `tolerance` of the reference's
    selection boundary (the smallest selected loss of that image): a tie either pick is right for."""
    ranked = np.where(labels > 0, -np.inf, losses.astype(np.float64))
    boundary = np.where(reference, ranked, np.inf).min(axis=1, keepdims=True)
    near = (np.abs(ranked - boundary) <= tolerance) | (ranked == boundary)
    return (native != reference) & near


def compare_negatives(native: np.ndarray, reference: np.ndarray, losses: np.ndarray, native_losses: np.ndarray,
                      labels: np.ndarray, tolerance: float) -> IndexDiff:
    """native, reference: [B,P] bool selections; losses: the reference's per-prior losses [B,P] and native_losses
    the native side's; labels: class targets [B,P] (positives rank at -inf); tolerance: per-prior loss bound."""
    diff = IndexDiff()
    for image in range(reference.shape[0]):
        ranked = np.where(labels[image] > 0, -np.inf, losses[image].astype(np.float64))
        selected = reference[image]
        boundary = ranked[selected].min() if selected.any() else np.inf
        differing = np.flatnonzero(native[image] != selected)
        if differing.size == 0:
            pass
        else:
            near = (np.abs(ranked[differing] - boundary) <= tolerance) | (ranked[differing] == boundary)
            diff.ties += int(near.sum())
            real = differing[~near]
            flat = image * reference.shape[1] + differing
            if real.size:
                diff.mismatches += int(real.size)
                diff.reasons.append(
                    f"image {image}: {real.size} negatives differ away from the selection boundary "
                    f"(boundary loss {boundary:.6g}, tolerance {tolerance:.3g})"
                )
                flat = image * reference.shape[1] + real
                diff.worst += _listing("mining.negatives", reference.shape, flat, native, reference, "not a tie")
            else:
                diff.worst += _listing("mining.negatives", reference.shape, flat, native, reference, "tie")
        if native[image].sum() != selected.sum():
            diff.mismatches += 1
            diff.reasons.append(f"image {image}: {native[image].sum()} negatives selected, reference {selected.sum()}")
        n_selected = int(selected.sum())
        native_sum = float(native_losses[image][native[image]].astype(np.float64).sum())
        reference_sum = float(losses[image][selected].astype(np.float64).sum())
        allowed = (n_selected + 2 * differing.size) * tolerance
        if abs(native_sum - reference_sum) > allowed:
            diff.mismatches += 1
            diff.reasons.append(
                f"image {image}: selected-loss sums differ by {abs(native_sum - reference_sum):.3g} > {allowed:.3g}"
            )
    return diff

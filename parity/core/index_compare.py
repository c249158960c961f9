"""Exact comparison of integer decisions (matches, labels) and tie-aware comparison of selections.

A selection ([B,N] booleans: which of N candidates each image picked by ranking a per-candidate loss, hard negative
mining for one) is compared per image. Where two candidates' losses are equal or closer than their bounds allow at
the selection boundary, either pick is correct (an unstable sort leaves the order of ties unspecified). A
difference confined to such candidates is reported as a tie, with its count; a difference anywhere else is a
failure. The selected-loss sums must agree either way.

The window is per candidate (`tolerance`: a number or a [B,N] array, how far each side's loss may be from the
exact one, both sides' bounds added). A candidate one side picks and the other does not took the place of another
picked candidate of the same image: the two swap only if their losses are within both their windows, so a
candidate is a tie when its distance to the boundary is within its own window plus the largest finite window among
the candidates either side picked in that image (never another image's).
"""

from dataclasses import dataclass, field

import numpy as np

MAX_LISTED = 5


@dataclass
class IndexDiff:
    mismatches: int = 0
    ties: int = 0
    reasons: list = field(default_factory=list)
    worst: list = field(default_factory=list)


def _listing(rules, name, shape, indices, native, reference, note=None) -> list:
    rows = []
    for flat in indices[:MAX_LISTED]:
        index = np.unravel_index(int(flat), shape)
        row = {"index": [int(i) for i in index], "meaning": rules.decode_index(name, shape, index),
               "native": int(native.ravel()[flat]), "reference": int(reference.ravel()[flat])}
        if note is not None:
            row["note"] = note
        rows.append(row)
    return rows


def compare_exact(rules, name: str, native: np.ndarray, reference: np.ndarray) -> IndexDiff:
    differing = np.flatnonzero(native.ravel() != reference.ravel())
    diff = IndexDiff(mismatches=int(differing.size))
    if differing.size:
        diff.reasons.append(f"{differing.size} of {native.size} entries differ (an index tensor must match exactly)")
        diff.worst = _listing(rules, name, native.shape, differing, native, reference)
    return diff


def selection_ties(native: np.ndarray, reference: np.ndarray, losses: np.ndarray, labels: np.ndarray,
                  tolerance) -> np.ndarray:
    """[B,N] mask of candidates selected by one side only whose ranking loss is near the reference's selection
    boundary (the smallest selected loss of that image), within the windows (module docstring): a tie either pick
    is right for."""
    ranked = np.where(labels > 0, -np.inf, losses.astype(np.float64))
    boundary = np.where(reference, ranked, np.inf).min(axis=1, keepdims=True)
    window = _per_candidate(tolerance, ranked.shape)
    return (native != reference) & _near(ranked, boundary, window, _partner(window, native | reference))


def _per_candidate(tolerance, shape) -> np.ndarray:
    return np.broadcast_to(np.asarray(tolerance, dtype=np.float64), shape)


def _partner(window: np.ndarray, picked: np.ndarray) -> np.ndarray:
    """window, picked: [..., N] -> [..., 1], the largest finite window among the candidates either side picked."""
    return np.where(picked & np.isfinite(window), window, 0.0).max(axis=-1, keepdims=True, initial=0.0)


def _near(ranked, boundary, window, partner) -> np.ndarray:
    """Where a candidate's loss is within its window plus its partner's of the selection boundary, or on it."""
    return (np.abs(ranked - boundary) <= window + partner) | (ranked == boundary)


def compare_selection(rules, name: str, native: np.ndarray, reference: np.ndarray, losses: np.ndarray,
                      native_losses: np.ndarray, labels: np.ndarray, tolerance) -> IndexDiff:
    """native, reference: [B,N] bool selections of tensor `name`; losses: the reference's per-candidate ranking
    losses [B,N] and native_losses the native side's; labels: class targets [B,N] (positives rank at -inf);
    tolerance: the per-candidate loss window (a number or [B,N]; module docstring)."""
    diff = IndexDiff()
    windows = _per_candidate(tolerance, reference.shape)
    for image in range(reference.shape[0]):
        ranked = np.where(labels[image] > 0, -np.inf, losses[image].astype(np.float64))
        selected, window = reference[image], windows[image]
        picked = selected | native[image]
        boundary = ranked[selected].min() if selected.any() else np.inf
        differing = np.flatnonzero(native[image] != selected)
        partner = float(_partner(window, picked)[0])
        if differing.size:
            near = _near(ranked[differing], boundary, window[differing], partner)
            diff.ties += int(near.sum())
            real = differing[~near]
            flat = image * reference.shape[1] + differing
            if real.size:
                diff.mismatches += int(real.size)
                diff.reasons.append(
                    f"image {image}: {real.size} selected candidates differ away from the selection boundary "
                    f"(boundary loss {boundary:.6g}, window there {window[real[0]] + partner:.3g})"
                )
                flat = image * reference.shape[1] + real
                diff.worst += _listing(rules, name, reference.shape, flat, native, reference, "not a tie")
            else:
                diff.worst += _listing(rules, name, reference.shape, flat, native, reference, "tie")
        if native[image].sum() != selected.sum():
            diff.mismatches += 1
            diff.reasons.append(f"image {image}: {native[image].sum()} candidates selected, reference {selected.sum()}")
        native_sum = float(native_losses[image][native[image]].astype(np.float64).sum())
        reference_sum = float(losses[image][selected].astype(np.float64).sum())
        # Each picked candidate's loss may be off by its window, each swapped pair by a window more (module docstring),
        # and the two float64 sums by their own rounding (they add the same values in another order at a tie).
        magnitude = float(np.abs(losses[image][picked].astype(np.float64)).sum())
        allowed = float(window[picked].sum() + (window[differing] + partner).sum()
                        + picked.sum() * np.finfo(np.float64).eps * magnitude)
        if abs(native_sum - reference_sum) > allowed:
            diff.mismatches += 1
            diff.reasons.append(
                f"image {image}: selected-loss sums differ by {abs(native_sum - reference_sum):.3g} > {allowed:.3g}"
            )
    return diff

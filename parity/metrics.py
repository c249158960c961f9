"""Elementwise error metrics between two arrays of the same shape, over the elements finite on both sides."""

import numpy as np


def nonfinite_counts(a: np.ndarray) -> dict:
    if not np.issubdtype(a.dtype, np.floating):
        return {"nan": 0, "posinf": 0, "neginf": 0}
    return {"nan": int(np.isnan(a).sum()), "posinf": int(np.isposinf(a).sum()), "neginf": int(np.isneginf(a).sum())}


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Number of representable values between a and b (same float dtype), as int64."""
    int_type = {4: np.int32, 8: np.int64}[a.dtype.itemsize]
    ia, ib = a.view(int_type).astype(np.int64), b.view(int_type).astype(np.int64)
    # Map the sign-magnitude float bit pattern onto a monotonic integer line.
    sign_bit = np.int64(1) << (8 * a.dtype.itemsize - 1)
    ia = np.where(ia < 0, -(ia & (sign_bit - 1)), ia)
    ib = np.where(ib < 0, -(ib & (sign_bit - 1)), ib)
    return np.abs(ia - ib)


def error_metrics(actual: np.ndarray, expected: np.ndarray) -> dict:
    """actual vs expected: max abs, max rel, NMSE, cosine similarity and max ULP, over elements finite in both
    (expected is the reference, in the same dtype as actual for the ULP count).

    The relative error divides by |expected| + eps * max|expected|, so that elements near zero in a tensor of
    large values do not report an infinite relative error for a difference of one rounding.
    """
    a = actual.astype(np.float64).ravel()
    e = expected.astype(np.float64).ravel()
    finite = np.isfinite(a) & np.isfinite(e)
    a, e = a[finite], e[finite]
    if a.size == 0:
        return {"max_abs": 0.0, "max_rel": 0.0, "nmse": 0.0, "cosine": 1.0, "max_ulp": 0, "finite_compared": 0}
    diff = np.abs(a - e)
    scale = float(np.max(np.abs(e)))
    eps = float(np.finfo(expected.dtype).eps) if np.issubdtype(expected.dtype, np.floating) else 0.0
    with np.errstate(over="ignore"):  # a difference against an all-zero tensor is an infinite relative error
        rel = diff / (np.abs(e) + eps * scale + np.finfo(np.float64).tiny)
    energy = float(np.sum(e * e))
    norms = float(np.linalg.norm(a) * np.linalg.norm(e))
    # ULPs are reported where they mean something: elements of at least 1e-3 of the largest magnitude (near zero
    # a tiny absolute difference spans millions of denormal-scale ULPs).
    both_float = np.issubdtype(actual.dtype, np.floating) and actual.dtype == expected.dtype
    sizable = np.abs(e) >= 1e-3 * scale
    max_ulp = None
    if both_float and sizable.any():
        max_ulp = int(ulp_distance(actual.ravel()[finite][sizable], expected.ravel()[finite][sizable]).max())
    return {
        "max_abs": float(diff.max()),
        "max_rel": float(rel.max()),
        "nmse": float(np.sum(diff * diff) / energy) if energy > 0 else float(np.sum(diff * diff) > 0),
        "cosine": float(np.dot(a, e) / norms) if norms > 0 else float(np.array_equal(a, e)),
        "max_ulp": max_ulp,
        "finite_compared": int(a.size),
    }

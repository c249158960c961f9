"""Elementwise error metrics between two arrays of the same shape, over the elements finite on both sides.

These run on every tensor of a parity run (tens of millions of elements at the full SSD300's batch 4), so each
avoids copies where it can: when every element is finite (the usual case) nothing is masked or gathered."""

import numpy as np


def nonfinite_counts(a: np.ndarray) -> dict:
    if not np.issubdtype(a.dtype, np.floating) or np.isfinite(a).all():
        return {"nan": 0, "posinf": 0, "neginf": 0}
    return {"nan": int(np.isnan(a).sum()), "posinf": int(np.isposinf(a).sum()), "neginf": int(np.isneginf(a).sum())}


def finite_values(values: np.ndarray) -> np.ndarray:
    """The finite elements: the array itself when all are (no copy), else the gathered ones."""
    finite = np.isfinite(values)
    return values if finite.all() else values[finite]


def max_abs(values: np.ndarray) -> float:
    """max |values| over the finite elements (0 when there are none), without an |values| temporary."""
    values = finite_values(values)
    if values.size == 0:
        return 0.0
    return float(max(values.max(), -values.min())) + 0.0  # + 0.0: never -0.0


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Number of representable values between a and b (same float dtype), as int64."""
    int_type = {4: np.int32, 8: np.int64}[a.dtype.itemsize]
    magnitude = int_type(np.iinfo(int_type).max)

    def on_a_line(x):
        # Sign-magnitude bit pattern -> a monotonic integer line: a negative pattern maps to -(its magnitude).
        # (bits ^ magnitude) - (-1) = -(bits & magnitude) when the sign is set; no int_type overflow either way.
        bits = x.view(int_type)
        sign = bits >> (8 * a.dtype.itemsize - 1)  # 0 or -1
        return ((bits ^ (sign & magnitude)) - sign).astype(np.int64)

    return np.abs(on_a_line(a) - on_a_line(b))


# Elements per block in error_metrics: a block's float64 temporaries stay in cache instead of each pass over a
# tensor of tens of millions of elements allocating and faulting in a fresh array.
BLOCK = 1 << 18


def error_metrics(actual: np.ndarray, expected: np.ndarray) -> dict:
    """actual vs expected: max abs, max rel, NMSE, cosine similarity and max ULP, over elements finite in both
    (expected is the reference, in the same dtype as actual for the ULP count).

    The relative error divides by |expected| + eps * max|expected|, so that elements near zero in a tensor of
    large values do not report an infinite relative error for a difference of one rounding. ULPs are reported where
    they mean something: elements of at least 1e-3 of the largest magnitude (near zero a tiny absolute difference
    spans millions of denormal-scale ULPs).
    """
    actual, expected = actual.ravel(), expected.ravel()
    finite = np.isfinite(actual) & np.isfinite(expected)
    if not finite.all():
        actual, expected = actual[finite], expected[finite]
    if actual.size == 0:
        return {"max_abs": 0.0, "max_rel": 0.0, "nmse": 0.0, "cosine": 1.0, "max_ulp": 0, "finite_compared": 0}
    scale = max_abs(expected)
    eps = float(np.finfo(expected.dtype).eps) if np.issubdtype(expected.dtype, np.floating) else 0.0
    both_float = np.issubdtype(actual.dtype, np.floating) and actual.dtype == expected.dtype
    largest_diff = largest_rel = 0.0
    diff_energy = energy = actual_energy = cross = 0.0
    max_ulp = None
    for start in range(0, actual.size, BLOCK):
        block_actual, block_expected = actual[start:start + BLOCK], expected[start:start + BLOCK]
        a = block_actual.astype(np.float64, copy=False)
        e = block_expected.astype(np.float64, copy=False)
        diff = np.abs(a - e)
        magnitude = np.abs(e)
        largest_diff = max(largest_diff, float(diff.max()))
        with np.errstate(over="ignore"):  # a difference against an all-zero tensor is an infinite relative error
            largest_rel = max(largest_rel, float((diff / (magnitude + eps * scale + np.finfo(np.float64).tiny)).max()))
        diff_energy += float(np.dot(diff, diff))
        energy += float(np.dot(e, e))
        actual_energy += float(np.dot(a, a))
        cross += float(np.dot(a, e))
        sizable = magnitude >= 1e-3 * scale
        if both_float and sizable.any():
            block_ulp = int(np.max(ulp_distance(block_actual, block_expected), where=sizable, initial=0))
            max_ulp = block_ulp if max_ulp is None else max(max_ulp, block_ulp)
    norms = float(np.sqrt(actual_energy) * np.sqrt(energy))
    return {
        "max_abs": largest_diff,
        "max_rel": largest_rel,
        "nmse": diff_energy / energy if energy > 0 else float(diff_energy > 0),
        "cosine": cross / norms if norms > 0 else float(np.array_equal(actual, expected)),
        "max_ulp": max_ulp,
        "finite_compared": int(actual.size),
    }

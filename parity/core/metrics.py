"""Elementwise error metrics between two arrays of the same shape, over the elements finite on both sides.

These run on every tensor of a parity run (tens of millions of elements at the full SSD300's batch 4), so each
avoids copies where it can: when every element is finite (the usual case) nothing is masked or gathered."""

import numpy as np

from parity import tensor_stats

KERNEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def kernel_reads(*arrays) -> bool:
    """Whether the compiled kernels (parity/kernels) take these arrays: float32 or float64, C-contiguous, not empty.
    Anything else goes through numpy."""
    return all(isinstance(a, np.ndarray) and a.dtype in KERNEL_DTYPES and a.flags.c_contiguous and a.size
               for a in arrays)


def nonfinite_counts(a: np.ndarray) -> dict:
    if kernel_reads(a):
        scan = tensor_stats.finite_scan(a)
        return {key: scan[key] for key in ("nan", "posinf", "neginf")}
    if not np.issubdtype(a.dtype, np.floating) or np.isfinite(a).all():
        return {"nan": 0, "posinf": 0, "neginf": 0}
    return {"nan": int(np.isnan(a).sum()), "posinf": int(np.isposinf(a).sum()), "neginf": int(np.isneginf(a).sum())}


def finite_values(values: np.ndarray) -> np.ndarray:
    """The finite elements: the array itself when all are (no copy), else the gathered ones."""
    finite = np.isfinite(values)
    return values if finite.all() else values[finite]


def max_abs(values: np.ndarray) -> float:
    """max |values| over the finite elements (0 when there are none), without an |values| temporary."""
    if kernel_reads(values):
        return tensor_stats.finite_scan(values)["max_abs"] + 0.0
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


class MetricsAccumulator:
    """error_metrics over a tensor fed block by block (add), for a caller that makes its own pass over the blocks.
    scale: max |expected| over the whole tensor (the relative error's floor and the ULP cut-off need it first)."""

    def __init__(self, actual_dtype, expected_dtype, scale: float):
        self.scale = scale
        self.eps = float(np.finfo(expected_dtype).eps) if np.issubdtype(expected_dtype, np.floating) else 0.0
        self.both_float = np.issubdtype(actual_dtype, np.floating) and actual_dtype == expected_dtype
        self.largest_diff = self.largest_rel = 0.0
        self.diff_energy = self.energy = self.actual_energy = self.cross = 0.0
        self.max_ulp = None
        self.size = 0

    @classmethod
    def from_kernel(cls, stats: dict, size: int) -> "MetricsAccumulator":
        """The same sums over a whole float32 tensor, taken in one pass by tensor_stats.native_stats."""
        metrics = cls(np.dtype(np.float32), np.dtype(np.float32), 0.0)
        metrics.size, metrics.largest_diff, metrics.largest_rel = size, stats["largest_diff"], stats["largest_rel"]
        metrics.diff_energy, metrics.energy = stats["diff_energy"], stats["energy"]
        metrics.actual_energy, metrics.cross, metrics.max_ulp = stats["actual_energy"], stats["cross"], stats["max_ulp"]
        return metrics

    def add(self, block_actual: np.ndarray, block_expected: np.ndarray) -> None:
        """One block of finite elements (1-D, the same length on both sides)."""
        self.size += block_actual.size
        a = block_actual.astype(np.float64, copy=False)
        e = block_expected.astype(np.float64, copy=False)
        diff = np.abs(a - e)
        magnitude = np.abs(e)
        self.largest_diff = max(self.largest_diff, float(diff.max(initial=0.0)))
        with np.errstate(over="ignore"):  # a difference against an all-zero tensor is an infinite relative error
            relative = diff / (magnitude + self.eps * self.scale + np.finfo(np.float64).tiny)
            self.largest_rel = max(self.largest_rel, float(relative.max(initial=0.0)))
        self.diff_energy += float(np.dot(diff, diff))
        self.energy += float(np.dot(e, e))
        self.actual_energy += float(np.dot(a, a))
        self.cross += float(np.dot(a, e))
        sizable = magnitude >= 1e-3 * self.scale
        if self.both_float and sizable.any():
            block_ulp = int(np.max(ulp_distance(block_actual, block_expected), where=sizable, initial=0))
            self.max_ulp = block_ulp if self.max_ulp is None else max(self.max_ulp, block_ulp)

    def result(self) -> dict:
        if self.size == 0:
            return {"max_abs": 0.0, "max_rel": 0.0, "nmse": 0.0, "cosine": 1.0, "max_ulp": 0, "finite_compared": 0}
        norms = float(np.sqrt(self.actual_energy) * np.sqrt(self.energy))
        return {
            "max_abs": self.largest_diff,
            "max_rel": self.largest_rel,
            "nmse": self.diff_energy / self.energy if self.energy > 0 else float(self.diff_energy > 0),
            # with no energy on one side, the tensors are equal exactly when every difference is 0
            "cosine": self.cross / norms if norms > 0 else float(self.largest_diff == 0.0),
            "max_ulp": self.max_ulp,
            "finite_compared": self.size,
        }


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
    metrics = MetricsAccumulator(actual.dtype, expected.dtype, max_abs(expected))
    for start in range(0, actual.size, BLOCK):
        metrics.add(actual[start:start + BLOCK], expected[start:start + BLOCK])
    return metrics.result()

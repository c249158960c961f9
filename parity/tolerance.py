"""Bounds, each derived rather than chosen.

Float tensors are held to a float64 oracle (the same reference run in float64 on the same weights and input).
The native float32 error against the oracle may be at most ORACLE_FACTOR times the reference's own float32 error
against the oracle, plus a floor for tensors whose reference error happens to be zero. This is the rule of
TorchDynamo's accuracy checker and of flash-attention's tests: a port is as good as the reference if its rounding
error is of the same size. Measured on both configs, the native/reference error ratio per tap is 0.5-1.05, so the
factor 2 separates rounding from bugs (a wrong bias, channel or order is orders of magnitude larger).

The native float64 build is held to the oracle at a relative error of STRICT_RELATIVE: the measured error is
1e-16 to 3e-15 of the tensor's largest value, and a single float32 rounding anywhere in the double path (a float
accumulator or constant) would cost at least 6e-8, five orders above the bound.
"""

from dataclasses import asdict, dataclass

import numpy as np

ORACLE_FACTOR = 2.0
FLOOR_EPS = 4.0  # floor = 4 float32 epsilons of the tensor's largest magnitude
STRICT_RELATIVE = 1e-10


@dataclass
class Bound:
    rule: str  # "oracle", "strict64" or "exact"
    value: float  # the largest allowed |native - yardstick|
    derivation: str
    reference_error: float | None = None  # max |reference32 - oracle|
    floor: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _max_abs_finite(diff: np.ndarray) -> float:
    finite = diff[np.isfinite(diff)]
    return float(np.max(np.abs(finite))) if finite.size else 0.0


def oracle_bound(reference: np.ndarray, oracle: np.ndarray) -> Bound:
    """Bound on max |native32 - oracle| from the reference's own float32 error."""
    reference_error = _max_abs_finite(reference.astype(np.float64) - oracle)
    scale = _max_abs_finite(oracle)
    floor = FLOOR_EPS * float(np.finfo(np.float32).eps) * scale
    value = ORACLE_FACTOR * reference_error + floor
    derivation = (
        f"{ORACLE_FACTOR:g} x reference float32 error vs float64 ({reference_error:.3g}) "
        f"+ {FLOOR_EPS:g} eps32 x max|oracle| ({floor:.3g})"
    )
    return Bound("oracle", value, derivation, reference_error, floor)


def strict64_bound(oracle: np.ndarray) -> Bound:
    scale = _max_abs_finite(oracle)
    return Bound("strict64", STRICT_RELATIVE * scale, f"{STRICT_RELATIVE:g} x max|oracle| ({scale:.3g})")


def exact_bound(what: str) -> Bound:
    return Bound("exact", 0.0, f"bit-identical: {what}")

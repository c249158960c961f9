"""Bounds, each derived rather than chosen.

Float tensors are held to a float64 oracle (the same reference run in float64 on the same weights and input).
The native float32 error against the oracle may be at most F times the reference's own float32 error against the
oracle, plus a floor for tensors whose reference error happens to be zero. This is the rule of TorchDynamo's
accuracy checker (torch._dynamo.utils.same with fp64_ref) and of flash-attention's tests: a port is as good as the
reference if its rounding error is of the same size. It is applied twice: to the RMS error (a bug spread over
the tensor) and to the largest error (a bug in one element).

F depends on how many elements carry information (non-zero in the oracle), as in TorchDynamo: 2 from 1000
elements, 3 below, 8 at 500 or fewer, 10 at 10 or fewer. The ratio of two maxima (or RMS) of a handful of
rounding errors is noisy: measured on SSD300, a bias gradient fed by 8 non-zero values reached a ratio of 8.5,
while tensors of thousands of elements stay within 0.5-1.6. Real bugs (a wrong bias, channel, order or buffer)
are orders of magnitude above either.

A parameter gradient counts as informative no more elements than the output gradient it is computed from has
non-zero values: every element of d loss / d weight is a sum over the same few non-zero output gradients, so its
rounding errors are as few and as correlated as theirs, however many weights there are. Measured: a head's weight
gradient (27,648 elements) fed by 100 non-zero location gradients in a generated batch-5 scenario reached a
native/reference error ratio of 7.7 while every upstream tensor stayed at 0.7-1.8.

In a propagated run a tensor also inherits the error of everything computed before it: when an upstream tensor
passed with a native/reference error ratio above 1 (a sparse gradient fed by few values, within its own factor),
the tensors computed from it carry that excess. So each tensor's factor is multiplied by the largest ratio (at
least 1, at most MAX_INHERITED) among the tensors that passed before it in execution order. The cap keeps every
bound within 20x the reference's own error; a real bug is orders of magnitude above that, and the float64 check
below is free of this noise altogether.

The native float64 build is held to the oracle at a relative error of STRICT_RELATIVE: the measured error is
1e-16 to 5e-14 of the tensor's largest value (gradients included), and a single float32 rounding anywhere in
the double path (a float accumulator or constant) would cost at least 6e-8, over two orders above the bound.
"""

from dataclasses import asdict, dataclass

import numpy as np

from parity import tensor_stats
from .metrics import BLOCK, finite_values, kernel_reads, max_abs

# (fewest informative elements, factor), checked in order; TorchDynamo's small-tensor multipliers.
FACTORS = ((10, 10.0), (500, 8.0), (999, 3.0))
LARGE_TENSOR_FACTOR = 2.0
FLOOR_EPS = 4.0  # floor = 4 float32 epsilons of the tensor's largest magnitude
MAX_INHERITED = 10.0
STRICT_RELATIVE = 1e-10


@dataclass
class Bound:
    rule: str  # "oracle", "strict64" or "exact"
    value: float  # the largest allowed |native - yardstick|
    derivation: str
    reference_error: float | None = None  # max |reference32 - oracle|
    floor: float | None = None
    rms_value: float | None = None  # the largest allowed RMS of native - oracle
    reference_rms: float | None = None
    factor: float | None = None
    informative: int | None = None  # elements the factor counted as carrying information
    inherited: float | None = None  # the upstream error ratio carried into the factor

    def to_dict(self) -> dict:
        return asdict(self)


def factor_for(informative: int) -> float:
    for fewest, factor in FACTORS:
        if informative <= fewest:
            return factor
    return LARGE_TENSOR_FACTOR


def rms(values: np.ndarray) -> float:
    """RMS over the finite elements (0 when there are none). A dot product, not mean(square(values)): no temporary
    the size of the tensor (measured 8 ms against 47 ms on 23M doubles)."""
    values = finite_values(values).ravel()
    return float(np.sqrt(np.dot(values, values) / values.size)) if values.size else 0.0


def oracle_bound(reference: np.ndarray, oracle: np.ndarray, inherited: float = 1.0,
                 fed_by: int | None = None) -> Bound:
    """Bounds on max and RMS of |native32 - oracle| from the reference's own float32 error; `inherited` is the
    upstream error ratio carried into this tensor (1 when nothing upstream exceeded the reference); `fed_by`, for a
    parameter gradient, the number of non-zero values of the output gradient it is computed from.

    The reference's error is measured over the elements where it is finite."""
    reference_error, energy, finite_count, scale, informative = _reference_error(reference, oracle)
    reference_rms = float(np.sqrt(energy / finite_count)) if finite_count else 0.0
    inherited = min(max(inherited, 1.0), MAX_INHERITED)
    if fed_by is not None:
        informative = min(informative, fed_by)
    factor = factor_for(informative) * inherited
    floor = FLOOR_EPS * float(np.finfo(np.float32).eps) * scale
    value = factor * reference_error + floor
    derivation = (
        f"{factor:.3g} x reference float32 error vs float64 ({reference_error:.3g}) "
        f"+ {FLOOR_EPS:g} eps32 x max|oracle| ({floor:.3g})"
        + (f"; factor includes {inherited:.3g} inherited from upstream" if inherited > 1 else "")
    )
    return Bound("oracle", value, derivation, reference_error, floor, factor * reference_rms + floor, reference_rms, factor,
                 informative, inherited)


def _reference_error(reference: np.ndarray, oracle: np.ndarray) -> tuple:
    """-> (max and sum of squares of |reference - oracle| over the elements where it is finite, their count,
    max |oracle| over its finite elements, oracle elements != 0): one pass of the compiled kernel for a float32
    reference and a float64 oracle (the parity run's case), else numpy, block by block."""
    if kernel_reads(reference, oracle) and reference.dtype == np.float32 and oracle.dtype == np.float64:
        s = tensor_stats.reference_error(reference, oracle)
        return s["largest"], s["energy"], s["finite"], s["scale"], s["nonzero"]
    reference, oracle = np.ravel(reference), np.ravel(oracle)
    reference_error = energy = scale = 0.0
    finite_count = informative = 0
    for start in range(0, reference.size, BLOCK):
        block_oracle = oracle[start:start + BLOCK]
        diff = finite_values(np.subtract(reference[start:start + BLOCK], block_oracle, dtype=np.float64))
        reference_error = max(reference_error, max_abs(diff))
        energy += float(np.dot(diff, diff))
        finite_count += diff.size
        scale = max(scale, max_abs(block_oracle))
        informative += int(np.count_nonzero(block_oracle))
    return reference_error, energy, finite_count, scale, informative


def strict64_bound(oracle: np.ndarray) -> Bound:
    scale = max_abs(oracle)
    return Bound("strict64", STRICT_RELATIVE * scale, f"{STRICT_RELATIVE:g} x max|oracle| ({scale:.3g})")


def exact_bound(what: str) -> Bound:
    return Bound("exact", 0.0, f"bit-identical: {what}")

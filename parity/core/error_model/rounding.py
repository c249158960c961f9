"""The rounding-error constants every stage's bound is built from (docs/tolerance.md derives them).

u is float32's unit roundoff. A sum of n terms computed in float32, in any order and any grouping (blocked,
pairwise, fused multiply-adds, several threads), lies within gamma(n) * sum|terms| of the exact sum:
deterministically within n*u / (1 - n*u) (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed.,
Lemma 3.1 and (3.5)), and, modelling the rounding errors as independent and of mean zero, within
expm1(LAMBDA*sqrt(n)*u + n*u^2/(1-u)) with probability at least 1 - 2n*exp(-LAMBDA^2 (1-u)^2 / 2) (Higham and Mary,
A New Approach to Probabilistic Rounding Error Analysis, SIAM J. Sci. Comput. 41(5), 2019, Theorem 3.1).
gamma(n) is the smaller of the two.

LAMBDA: the chance of a false alarm anywhere in a sweep is at most 2 * (sum over judged elements of their n) *
exp(-LAMBDA^2 (1-u)^2 / 2). `make test` judges about 2e9 elements (both float32 sides, propagated and isolated,
every case) with n at most 4e5 (SSD300's first weight gradient at batch 4): at most 1e15 terms, and LAMBDA = 11 puts
the chance below 2e15 * exp(-60.5) = 1e-11, within the 1e-6 asked of the whole suite with room for many sweeps.
"""

import math
from contextlib import contextmanager

import numpy as np
import torch

U = 2.0 ** -24  # float32's unit roundoff: the float32 sides' bounds
FLOAT64_U = 2.0 ** -53  # float64's: a float64 side's near-ties and the strict check
_unit_roundoff = U
LAMBDA = 11.0
# An elementwise function (exp, log, sqrt, division) of a correct float32 port is within a few units in the last
# place: torch's vectorized exp and log are within 1 ulp (SLEEF u10), a libm within 1; ULPS allows a port another
# formula of the same function (a different order of its few operations) as well.
ULPS = 4.0
# Underflow: a result below float32's smallest normal (2^-126) may be flushed to zero, an absolute error below 2^-126
# per operation. No element here is computed by 2^26 operations, so 2^-100 covers them all: added to every
# bound (it is 1e-30, far below any value that matters: gradients that carry information are above 1e-15).
UNDERFLOW = 2.0 ** -100
# Each bound is itself evaluated in float64 (its convolutions of magnitudes in float32, widened: magnitudes()):
# 2^-40 of it covers the float64 arithmetic's own rounding.
EVALUATION = 2.0 ** -40
# magnitudes() evaluates in float32 only while every partial sum stays below this (far from float32's 2^128).
FLOAT32_EVALUATION_LIMIT = 2.0 ** 100
FLOAT32_U = 2.0 ** -24
FLOAT32_TINY = 2.0 ** -126  # float32's smallest normal: below it a product or operand may be flushed to zero


def finished(bound):
    """A bound as judged, in place: widened for its own float64 evaluation and for underflow; NaN (from a
    non-finite input) becomes +inf, not judged there (the non-finite check judges it)."""
    bound *= 1 + EVALUATION
    bound += UNDERFLOW
    bound[np.isnan(bound)] = np.inf
    return bound


def u() -> float:
    """The unit roundoff the bounds are derived for: float32's, or another's within unit_roundoff()."""
    return _unit_roundoff


@contextmanager
def unit_roundoff(value: float):
    """Within: every bound is derived for a format of unit roundoff `value` (the same analysis, another u)."""
    global _unit_roundoff
    saved, _unit_roundoff = _unit_roundoff, value
    try:
        yield
    finally:
        _unit_roundoff = saved


def gamma(n: int) -> float:
    """The bound factor on |computed - exact| / sum|terms| for a sum of n terms (products included), in the format
    of unit roundoff u()."""
    n, unit = max(int(n), 1), u()
    deterministic = n * unit / (1.0 - n * unit) if n * unit < 1 else math.inf
    probabilistic = math.expm1(LAMBDA * math.sqrt(n) * unit + n * unit * unit / (1.0 - unit))
    return min(deterministic, probabilistic)


def magnitudes(compute, *operands, terms: int):
    """compute(*operands) -> float64, a bound on its exact value, where each element of the result is a sum of at most
    `terms` products of at most two operand elements, every operand >= 0 (a convolution of |x| with |W| plus |b|,
    say), evaluated in float32: PyTorch's CPU convolutions run 2-4x faster there than in float64, and a bound needs
    a few correct digits, not sixteen.

    With no negative term there is no cancellation: rounding each operand to float32 costs a factor (1 - u) per
    operand of a product, and the float32 sum of `terms` nonnegative products, in any order and grouping, is at
    least (1 - u)^terms times its exact value [Higham, Lemma 3.1]; an operand or product below float32's smallest
    normal, flushed to zero, loses at most FLOAT32_TINY (1 + the largest operand) per term. So the exact value is at
    most the float32 result / ((1 - u)^2 (1 - terms u)) + terms FLOAT32_TINY (1 + largest). Where a sum could come
    near float32's overflow (or an operand is not finite) it is evaluated in float64 instead."""
    maxima = [float(op.max()) if op.numel() else 0.0 for op in operands]
    largest = max(maxima, default=0.0)
    reach = terms * math.prod(max(1.0, m) for m in maxima)  # at least every sum's largest value, as finite as they
    if not reach < FLOAT32_EVALUATION_LIMIT or terms * FLOAT32_U >= 0.5:
        return compute(*operands)
    result = compute(*(op.to(torch.float32) for op in operands)).to(torch.float64)
    widening = 1.0 / ((1.0 - FLOAT32_U) ** 2 * (1.0 - terms * FLOAT32_U))
    return result.mul_(widening).add_(terms * FLOAT32_TINY * (1.0 + largest))


def per_image(compute, *batched, combine="stack"):
    """compute(*tensors) on one image at a time ([i:i+1] of each (B,...) argument), the results concatenated along
    the batch (combine="stack") or summed (combine="sum", a weight gradient's sum over the batch): exact for a
    per-image stage, and its float64 temporaries (a convolution's columns: 0.4 GB per 300x300 image of 64
    channels) are one image's, not the batch's."""
    parts = None
    for i in range(batched[0].shape[0]):
        part = compute(*(t[i:i + 1] for t in batched))
        if combine == "sum":
            parts = part if parts is None else parts.add_(part)
        else:
            parts = [part] if parts is None else parts + [part]
    return parts if combine == "sum" else torch.cat(parts)

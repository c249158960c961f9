"""The typical rounding error of a float32 sum, beside its worst case (rounding.gamma): a statistical verdict that
sees an error many times the natural one where a per-element worst-case bound, which allows every partial sum to be
as large as the sum of magnitudes, cannot (docs/tolerance.md, "The typical error").

Model. A sum y of m nonzero terms t_1..t_m (products rounded or fused), added in an order unrelated to the terms'
signs (any loop order, blocked or vectorized, several accumulators), with rounding errors independent, of mean zero
and of relative variance at most u^2/3 (an error uniform over half an ulp either side; largest, relative to the
value, at a power of two). To first order the error is sum_k delta_k s_k + sum_i delta'_i t_i over the partial sums
s_k. For an order that is a random permutation of the terms, E[s_k^2] = k(m-k)/(m-1) var(t) + (k/m)^2 y^2, and
summed over k that is at most (m+1)/6 sum t^2 + (m+2)/3 y^2. So

    var(error) <= u^2/3 * (((m+1)/6 + 1) * sum t^2 + (m+2)/3 * y^2)        (+ underflow's share)

A plain loop over terms in random order meets it (tests/test_typical_error.py: numpy's float32 cumsum, sequential,
sits at 0.7); a blocked or pairwise one sits below or near it (PyTorch's convolutions, 0.2-0.8 of it). An order sorted by the
terms' signs would break the model.

Verdict. z_i = error_i / sqrt(var_i) over the elements that are not identical computations (elements with the same
exact value and the same computed value count once, so a constant feature map is one sample, not thousands), on a
fixed sample of at most SAMPLE of them. Averaged over random orders, a plain loop has E[z^2] <= 1. A port's order is
fixed, though, and one output channel's weights in that order may make its partial sums larger than the average
(measured on the native port: channel by channel up to 2.4 times the whole tensor's ratio); a tensor of C channels
averages C such draws. RATIO_LIMIT = 2 leaves a plain loop that room over a tensor of 8 channels or more (judging
one channel alone would need a limit near 5, too loose to be worth it). On top of it, the chi-square tail of k
samples: by the Laurent-Massart bound P(chi2_k >= k + 2 sqrt(k x) + 2x) <= exp(-x) (Ann. Statist. 28(5), 2000,
Lemma 1), the root mean square of z may reach RATIO_LIMIT * sqrt(1 + 2 sqrt(x/k) + 2x/k), x = ln(1/FALSE_ALARM):
one false alarm in 1e9 tensors. The 15x error of the tests is caught with room (tests/test_typical_error.py);
PyTorch's convolutions sit at 0.2-0.8, the native port's at 0.35-0.8.
"""

import math

import numpy as np

from .rounding import FLOAT32_TINY, U

SAMPLE = 1 << 16  # elements judged per tensor: enough for a limit within 3 % of RATIO_LIMIT
MIN_CHANNELS = 16  # a tensor judged on a subset of its output channels averages at least this many (see above)
RATIO_LIMIT = 2.0
FALSE_ALARM = 1e-9  # per tensor: `make test` judges a few thousand
_SEED = 20261206  # the sample is fixed: the same tensor is always judged on the same elements


def sum_variance(terms, squares, exact):
    """terms (count of nonzero terms of each sum), squares (sum t^2), exact (the exact sum y), float64 arrays of one
    shape -> the model's variance of a float32 sum's error, per element. An operation below float32's smallest
    normal may lose up to FLOAT32_TINY: each of the m operations adds that much to the variance's share."""
    unit = U * U / 3
    return (unit * (((terms + 1) / 6 + 1) * squares + (terms + 2) / 3 * exact * exact)
            + terms * (FLOAT32_TINY * FLOAT32_TINY))


def channel_subset(channels: int, per_channel: int) -> np.ndarray:
    """The output channels a stage is judged on, sorted: all of them where they hold at most 2 SAMPLE elements
    (about half are a ReLU's dead zeros), else a fixed pseudo-random subset of at least MIN_CHANNELS that does.
    Computing the exact float64 result of every channel of a 512-channel layer to judge 65,536 of its elements
    would cost more than the rest of the isolated replay; the subset keeps the cost flat in the batch size."""
    wanted = max(MIN_CHANNELS, math.ceil(2 * SAMPLE / max(per_channel, 1)))
    if wanted >= channels:
        return np.arange(channels)
    return np.sort(np.random.default_rng(_SEED).choice(channels, wanted, replace=False))


def limit(samples: int) -> float:
    """The largest root mean square of z a correct side reaches over `samples` distinct elements, but once in
    1/FALSE_ALARM tensors."""
    if samples == 0:
        return math.inf
    x = math.log(1 / FALSE_ALARM)
    return RATIO_LIMIT * math.sqrt(1 + 2 * math.sqrt(x / samples) + 2 * x / samples)


def judge(side, exact, variance) -> dict:
    """side (float32), exact (float64, the same shape: the exact result on the side's own inputs), variance (the
    model's, per element) -> the root mean square of z ("ratio"), the distinct samples it was taken over, their
    limit, and "margin" = ratio / limit: above 1 fails.

    Elements where both are zero (a ReLU's dead half), where the model expects no error (variance 0: every term
    zero) or where a value is not finite carry no information and are left out."""
    side = np.asarray(side).ravel()
    exact, variance = np.asarray(exact, dtype=np.float64).ravel(), np.asarray(variance, dtype=np.float64).ravel()
    with np.errstate(invalid="ignore"):
        live = np.flatnonzero((variance > 0) & ((side != 0) | (exact != 0)) & np.isfinite(side) & np.isfinite(exact))
    if live.size > SAMPLE:
        live = np.random.default_rng(_SEED).choice(live, SAMPLE, replace=False)
    computed = side[live].astype(np.float64)
    # (exact, computed) pairs as one complex key: a 1-D unique, five times faster than np.unique(axis=0)
    _, distinct = np.unique(exact[live] + 1j * computed, return_index=True)
    live, computed = live[distinct], computed[distinct]
    z2 = (computed - exact[live]) ** 2 / variance[live]
    ratio = float(math.sqrt(z2.mean())) if z2.size else 0.0
    allowed = limit(z2.size)
    return {"ratio": ratio, "samples": int(z2.size), "limit": allowed, "margin": ratio / allowed}

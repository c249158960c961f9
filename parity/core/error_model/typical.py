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
averages C such draws. RATIO_LIMIT = 2 leaves a plain loop that room over a tensor of 8 channels or more (one
channel alone needs more: below). On top of it, the chi-square tail of k
samples: by the Laurent-Massart bound P(chi2_k >= k + 2 sqrt(k x) + 2x) <= exp(-x) (Ann. Statist. 28(5), 2000,
Lemma 1), the root mean square of z may reach RATIO_LIMIT * sqrt(1 + 2 sqrt(x/k) + 2x/k), x = ln(1/FALSE_ALARM):
one false alarm in 1e9 tensors. The 15x error of the tests is caught with room (tests/test_typical_error.py);
PyTorch's convolutions sit at 0.2-0.8, the native port's at 0.35-0.8.

Channel by channel. A bug confined to one output channel (its bias, its weights) is diluted C times in the tensor's
mean of z^2, so each channel judged is also held alone to CHANNEL_RATIO_LIMIT, with the tail of its own count and x
= ln(channels / FALSE_ALARM) (a union bound over the channels). One channel has no average over channels to lean on:
a plain loop's fixed order makes that channel's E[z^2] = F, the sum of its squared partial sums over their mean over
random orders. With the terms' order independent of their values, the partial sums are a random bridge, F is
distributed as 6/pi^2 sum_j Z_j^2 / j^2 (the Karhunen-Loeve expansion of the Brownian bridge's integral of squares),
and P(F > t) ~ sqrt(2) P(chi2_1 > pi^2 t / 6) (its first term dominates; 4e6 simulated bridges agree within 6 % at t
= 4 and t = 9): 2e-10 at t = 25, hence CHANNEL_RATIO_LIMIT = 5. Measured on the narrow sweep at batch 2 and the full
SSD300 at batch 1: the worst channel of PyTorch (oneDNN's AVX-512 and SSE4.1 paths) reads 1.0, of the native port
1.7 (one channel of a 75x75 layer on its AVX-512 tile), where one channel's bias off by 1e-3 reads 41.
"""

import math

import numpy as np

from .rounding import FLOAT32_TINY, U

SAMPLE = 1 << 16  # elements judged per tensor: enough for a limit within 3 % of RATIO_LIMIT
MIN_CHANNELS = 16  # a tensor judged on a subset of its output channels averages at least this many (see above)
RATIO_LIMIT = 2.0
CHANNEL_RATIO_LIMIT = 5.0  # one channel alone (see above)
WEIGHT_SAMPLE = 1 << 12  # weight-gradient elements judged per layer (weight_subset)
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


def weight_subset(out_channels: int, in_channels: int, taps: int) -> tuple:
    """The weight-gradient elements a layer is judged on: (rows, cols), sorted, fixed pseudo-random subsets of its
    output channels (at least MIN_CHANNELS) and input channels, about WEIGHT_SAMPLE elements in all. Each element
    judged costs a pass over the layer's B*OH*OW products (conv_weight_typical); the subset keeps a full SSD300
    layer's pass at a second or two."""
    rng = np.random.default_rng(_SEED)
    rows = np.sort(rng.choice(out_channels, min(out_channels, MIN_CHANNELS), replace=False))
    wanted = max(1, WEIGHT_SAMPLE // (len(rows) * taps))
    cols = np.sort(rng.choice(in_channels, min(in_channels, wanted), replace=False))
    return rows, cols


def limit(samples, tests: int = 1, ratio: float = RATIO_LIMIT):
    """The largest root mean square of z a correct side reaches over `samples` distinct elements (a count or an
    array of counts), but once in 1/FALSE_ALARM tensors, whichever of `tests` such means is taken; `ratio` is the
    largest E[z^2]'s root a correct order reaches (RATIO_LIMIT over a tensor, CHANNEL_RATIO_LIMIT over a channel)."""
    samples = np.asarray(samples, dtype=np.float64)
    x = math.log(tests / FALSE_ALARM)
    with np.errstate(divide="ignore"):
        allowed = ratio * np.sqrt(1 + 2 * np.sqrt(x / samples) + 2 * x / samples)
    return float(allowed) if allowed.ndim == 0 else allowed


def judge(side, exact, variance, channel_axis: int | None = None, channels=None) -> dict:
    """side (float32), exact (float64, the same shape: the exact result on the side's own inputs), variance (the
    model's, per element) -> the root mean square of z ("ratio"), the distinct samples it was taken over, their
    limit, and "margin" = ratio / limit: above 1 fails. With channel_axis, each channel along it is judged alone too
    ("channel": the worst one's index, taken from `channels` where the arrays hold a subset, ratio, samples, limit
    and margin), and "margin" is the larger of the two.

    Elements where both are zero (a ReLU's dead half), where the model expects no error (variance 0: every term
    zero) or where a value is not finite carry no information and are left out."""
    shape = np.shape(side)
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
    allowed = limit(z2.size) if z2.size else math.inf
    verdict = {"ratio": ratio, "samples": int(z2.size), "limit": allowed, "margin": ratio / allowed}
    if channel_axis is not None:
        verdict["channel"] = _worst_channel(np.unravel_index(live, shape)[channel_axis], z2, shape[channel_axis],
                                            channels)
        verdict["margin"] = max(verdict["margin"], verdict["channel"]["margin"])
    return verdict


def _worst_channel(channel_of, z2, count, channels) -> dict:
    """The channel whose root mean square of z is furthest above its own limit, over the channels with samples."""
    samples = np.bincount(channel_of, minlength=count)
    judged = np.flatnonzero(samples)
    if not judged.size:
        return {"index": None, "ratio": 0.0, "samples": 0, "limit": math.inf, "margin": 0.0}
    ratios = np.sqrt(np.bincount(channel_of, weights=z2, minlength=count)[judged] / samples[judged])
    allowed = limit(samples[judged], judged.size, CHANNEL_RATIO_LIMIT)
    worst = int(np.argmax(ratios / allowed))
    index = int(judged[worst]) if channels is None else int(np.asarray(channels)[judged[worst]])
    return {"index": index, "ratio": float(ratios[worst]), "samples": int(samples[judged[worst]]),
            "limit": float(allowed[worst]), "margin": float(ratios[worst] / allowed[worst])}

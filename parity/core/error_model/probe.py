"""Exact probes of a convolution: inputs on which float32 has no rounding to hide behind.

A probe image is zero but for a few impulses, each a signed power of two on one input channel, placed so that no
output reads two of them. Every output then sums bias + at most one product a*w, and a*w is exact (a is a power of
two): whatever the loop order, blocking, vector width or fused multiply-add, the float32 result is one rounding of
b + a*w, bit for bit. The zero image shows each bias itself. Behind a ReLU a negative bias shows only where an
impulse lifts b + a*w above zero: for each such output channel the probe puts an impulse on the input channel and
tap of its largest weight (among PROBE_CHANNELS input channels), scaled so that a*w lies between 2|b| and 8|b|,
where one ulp of the result is below 2^-20 |b|. The weights the impulses meet are shown with them.

An implementation that is a sum of products passes with zero differences (PyTorch on oneDNN's AVX-512, AVX2 and
SSE4.1 paths does); one that is not (Winograd, FFT) would fail, and is then not the float32 arithmetic this
harness's bounds describe. A bias off by a relative 1e-6, which the statistical verdicts cannot see beside a
layer's rounding noise, differs here."""

import math

import numpy as np

from .rounding import U

PROBE_CHANNELS = 4  # input channels the impulses may use (those with the largest weights)
MAX_IMAGES = 8  # impulse images per stage at most; channels left out are reported as unseen
MAX_EXPONENT = 60  # |log2 a| at most: a, a*w and b + a*w stay far from float32's subnormals and overflow
SHOWN = 32  # a bias counts as shown by an element below SHOWN |b|: one ulp there is below 2^-18 |b|


def conv_probe(module, weight, bias, input_shape, relu: bool) -> dict:
    """module (a Conv2d: the geometry), weight (OC,C,KH,KW) and bias (OC,) float64 holding the float32 parameters,
    input_shape (B,C,H,W) -> {"input": (P,C,H,W) float32, "expected": (P,OC,OH,OW) float32, "magnitude": its
    terms' |b| + |a*w| (float64), "unseen": the output channels with a nonzero bias no probe element shows}. Image 0
    is all zeros."""
    geometry = _Geometry(module, input_shape[2:])
    weight, bias = weight.numpy(), bias.numpy()
    placed = _place(_impulses(weight, bias, relu), geometry)
    probe = np.zeros((1 + len(placed), input_shape[1], *input_shape[2:]), np.float32)
    exact = np.broadcast_to(bias[None, :, None, None], (len(probe), len(bias), geometry.out_h, geometry.out_w)).copy()
    magnitude = np.abs(exact)
    for image, impulses in enumerate(placed, start=1):
        for (channel, y, x), value in impulses:
            probe[image, channel, y, x] = value
            for ky, out_y in geometry.readers(y, 0):
                for kx, out_x in geometry.readers(x, 1):
                    # b + a*w: two float32 values, exact in float64 or (more than 29 bits apart) rounded far
                    # from a float32 midpoint, so the cast below is the one correct rounding
                    exact[image, :, out_y, out_x] = bias + value * weight[:, channel, ky, kx]
                    magnitude[image, :, out_y, out_x] = np.abs(bias) + np.abs(value * weight[:, channel, ky, kx])
    expected = exact.astype(np.float32)
    if relu:
        expected = np.maximum(expected, 0)
    return {"input": probe, "expected": expected, "magnitude": magnitude, "unseen": _unseen(expected, bias)}


class _Geometry:
    """A convolution's index arithmetic, per dimension (0: rows, 1: columns)."""

    def __init__(self, module, size):
        self.kernel, self.stride = module.kernel_size, module.stride
        self.padding, self.dilation, self.size = module.padding, module.dilation, tuple(size)
        self.out_h, self.out_w = ((n + 2 * p - d * (k - 1) - 1) // s + 1 for n, p, d, k, s in
                                  zip(self.size, self.padding, self.dilation, self.kernel, self.stride))

    def readers(self, p, dim) -> list:
        """-> [(tap, output)] of the outputs along dim that read input p, and through which tap."""
        k, s, pad, d = self.kernel[dim], self.stride[dim], self.padding[dim], self.dilation[dim]
        out = (self.out_h, self.out_w)[dim]
        return [(t, (p + pad - t * d) // s) for t in range(k)
                if (p + pad - t * d) % s == 0 and 0 <= (p + pad - t * d) // s < out]

    def spots(self, ky, kx) -> list:
        """Inputs that reach an output through tap (ky, kx), in raster order."""
        ys = [o * self.stride[0] - self.padding[0] + ky * self.dilation[0] for o in range(self.out_h)]
        xs = [o * self.stride[1] - self.padding[1] + kx * self.dilation[1] for o in range(self.out_w)]
        return [(y, x) for y in ys if 0 <= y < self.size[0] for x in xs if 0 <= x < self.size[1]]

    def outputs(self, y, x) -> tuple:
        """Index arrays of the outputs that read input (y, x)."""
        return np.ix_([o for _, o in self.readers(y, 0)], [o for _, o in self.readers(x, 1)])


def _impulses(weight, bias, relu) -> list:
    """-> [(input channel, ky, kx, value)], one per distinct need: each output channel whose negative bias a ReLU
    hides gets an impulse on its largest weight's channel and tap, with a*w in [2|b|, 8|b|)."""
    if not relu:
        return []
    strength = np.abs(weight).max(axis=(2, 3)).sum(axis=0)  # (C,)
    usable = np.sort(np.argsort(-strength, kind="stable")[:PROBE_CHANNELS])
    needs = set()
    for out in np.flatnonzero(bias < 0):
        taps = weight[out, usable]  # (PROBE_CHANNELS, KH, KW)
        where = np.unravel_index(int(np.argmax(np.abs(taps))), taps.shape)
        w = float(taps[where])
        if w == 0:
            continue
        exponent = 2 * math.ceil(math.log2(2 * -bias[out] / abs(w)) / 2)  # even exponents: |a w| in [2|b|, 8|b|)
        if abs(exponent) > MAX_EXPONENT:  # a, a*w or b near float32's range ends: left unseen
            continue
        needs.add((int(usable[where[0]]), int(where[1]), int(where[2]), math.copysign(2.0 ** exponent, w)))
    return sorted(needs)


def _place(impulses, geometry) -> list:
    """-> images, each [((channel, y, x), value)], no output reading two impulses of its image (an output that read
    two would sum two products, and their order would matter). Each impulse sits where its tap (ky, kx) reaches an
    output; spots are scanned in raster order, and a spot passed over stays taken, so each tap's scan resumes where
    it stopped."""
    images, current, taken, resume = [], [], np.zeros((geometry.out_h, geometry.out_w), bool), {}
    for channel, ky, kx, value in impulses:
        candidates = geometry.spots(ky, kx)
        if not candidates:  # a tap that only ever meets padding (a 3x3 conv on a 1x1 map): its channels stay unseen
            continue
        free = None
        for _ in range(2):
            free = next((i for i in range(resume.get((ky, kx), 0), len(candidates))
                         if not taken[geometry.outputs(*candidates[i])].any()), None)
            if free is not None or not current:
                break
            images.append(current)  # this image is full for that tap: start another
            current, taken, resume = [], np.zeros_like(taken), {}
        if free is None or len(images) == MAX_IMAGES:
            break
        taken[geometry.outputs(*candidates[free])] = True
        resume[(ky, kx)] = free + 1
        current.append(((channel, *candidates[free]), value))
    if current and len(images) < MAX_IMAGES:
        images.append(current)
    return images


def _unseen(expected, bias) -> list:
    """Output channels with a nonzero bias where no probe element is positive (or, without a ReLU, nonzero) and
    within SHOWN |b|: a bias error there would not show."""
    magnitude = np.abs(expected.astype(np.float64)).transpose(1, 0, 2, 3).reshape(len(bias), -1)
    shown = ((magnitude > 0) & (magnitude < SHOWN * np.abs(bias)[:, None])).any(axis=1)
    return [int(c) for c in np.flatnonzero(~shown & (bias != 0))]


def judge_probe(side, expected, magnitude) -> dict:
    """side and expected (P,OC,OH,OW) float32, magnitude (the terms' |b| + |a*w|) -> the elements that differ, the
    largest difference in units of one rounding of the terms (u (|b| + |a*w|): a correct side reads 0, a sum
    rounded once more at most 1), where it is, and the output channels that differ."""
    side, expected = np.asarray(side, np.float64), np.asarray(expected, np.float64)
    differs = side != expected
    scale = U * np.maximum(magnitude, np.finfo(np.float32).tiny)
    units = np.where(differs, np.abs(side - expected) / scale, 0.0)
    units = np.nan_to_num(units, nan=np.inf)
    worst = np.unravel_index(int(np.argmax(units)), units.shape) if differs.any() else None
    return {"elements": int(side.size), "differ": int(differs.sum()), "units": float(units.max(initial=0.0)),
            "worst": None if worst is None else [int(i) for i in worst],
            "channels": [int(c) for c in np.flatnonzero(differs.any(axis=(0, 2, 3)))]}

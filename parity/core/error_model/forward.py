"""Per-element bounds of the forward stages: |side - oracle| <= own rounding + the side's input deviation carried
through the stage. Every argument is a float64 tensor: oracle values, |W| from the (exact) weights, and `dx`, the
measured |side input - oracle input|."""

import torch
import torch.nn.functional as F

from . import typical
from .rounding import ULPS, gamma, magnitudes, per_image, u

L2NORM_EPS = 1e-12  # torchvision's F.normalize clamp


def conv(module, x, dx, weight, bias, dweight=None, dbias=None):
    """x, dx (B,C,H,W), weight (OC,C,KH,KW), bias (OC), and where the side's weights drifted from the oracle's (a
    training trajectory) their deviations dweight, dbias -> (B,OC,OH,OW).

    fl(sum w*x_side + b) is within gamma(n) * (|W|*|x_side| + |b|) of the exact sum on the side's input, n = C*KH*KW
    products plus the bias; that sum is within |W|*dx of the oracle's. |x_side| <= |x| + dx. A side's own weights
    W + E add |E|*|x_side| + |db| (and their share of the rounding). A ReLU after it is 1-Lipschitz and exact, so the
    bound holds for the tap after ReLU too. The convolutions of magnitudes are evaluated by rounding.magnitudes."""
    n = weight[0].numel() + 1
    g = gamma(n)
    convolve = lambda v, w, b: F.conv2d(v, w, b, module.stride, module.padding, module.dilation)
    weight, bias = weight.abs(), g * bias.abs()
    if dweight is None and dbias is None:
        return per_image(lambda x, dx: magnitudes(convolve, g * x.abs() + (1 + g) * dx, weight, bias, terms=n), x, dx)
    dweight = torch.zeros_like(weight) if dweight is None else dweight
    dbias = torch.zeros_like(bias) if dbias is None else dbias

    def one_image(x, dx):
        return (magnitudes(convolve, g * x.abs() + (1 + g) * dx, weight, bias, terms=n)
                + magnitudes(convolve, (1 + g) * (x.abs() + dx), dweight, (1 + g) * dbias, terms=n))

    return per_image(one_image, x, dx)


def conv_typical(module, x, weight, bias, relu: bool):
    """x (B,C,H,W) a side's own input, weight (OC,C,KH,KW), bias (OC), float64 -> (exact (B,OC,OH,OW): the stage on
    x, after its ReLU if it has one; the typical-error model's variance of a float32 evaluation of it, per element).
    To judge a subset of the output channels, pass their rows of weight and bias.

    Each output is a sum of C products per kernel tap inside the image (the padding's taps are zeros, added
    exactly) plus the bias; sum t^2 is the convolution of x^2 with W^2 plus b^2; the variance is the sum's before the
    ReLU, which cannot add to the error (it is 1-Lipschitz). typical.py derives the model."""
    convolve = lambda v, w, b: F.conv2d(v, w, b, module.stride, module.padding, module.dilation)
    inside = convolve(torch.ones_like(x[:1, :1]), torch.ones((1, 1, *weight.shape[2:]), dtype=x.dtype), None)
    terms = weight.shape[1] * inside + (bias != 0).to(x.dtype).view(1, -1, 1, 1)
    exact, variance = [], []
    for image in x.split(1):  # one image's float64 temporaries at a time, as per_image does
        value = convolve(image, weight, bias)
        variance.append(typical.sum_variance(terms, convolve(image * image, weight * weight, bias * bias), value))
        exact.append(value.clamp_min(0) if relu else value)
    return torch.cat(exact), torch.cat(variance)


def pool(module, dx):
    """dx (B,C,H,W) -> (B,C,OH,OW): a max is exact and |max(a) - max(b)| <= max|a - b| over the window."""
    return F.max_pool2d(dx, module.kernel_size, module.stride, module.padding, module.dilation, module.ceil_mode)


def l2norm_parts(x, dx):
    """-> (norm (B,1,H,W) of the oracle's x, clamped at eps; the first-order deviation of x/norm from dx, where the
    norm is judgeable; a mask of pixels whose deviation is too large against their norm to bound, |dx| > norm/4)."""
    norm = x.norm(dim=1, keepdim=True)
    denom = norm.clamp_min(L2NORM_EPS)
    dnorm = dx.norm(dim=1, keepdim=True)
    xhat = x.abs() / denom
    # d(x/|x|) = (I - xhat xhat^T) dx / |x|: |.|_c <= (dx_c + |xhat_c| sum_j |xhat_j| dx_j) / |x|; the second-order
    # remainder is at most 2 |dx|^2 / |x|^2 (|dx| <= |x|/4).
    deviation = (dx + xhat * (xhat * dx).sum(dim=1, keepdim=True) + 2 * dnorm * dnorm / denom) / denom
    return denom, deviation, dnorm > norm / 4


def l2norm(x, dx, scale, out, dscale=None):
    """x, dx (B,C,H,W) the feature map normalized over its channels, scale (C), out (B,C,H,W) the oracle's output, dscale (C) the side's scale's drift
    from the oracle's (a training trajectory) or None -> (B,C,H,W).

    Own rounding: the norm's sum of C squares (gamma(C), halved by the square root) and a few roundings (the
    square root, the division, the scale). A pixel whose input deviation exceeds a quarter of its norm cannot be
    bounded below 2 |scale| (|x / |x|| <= 1 on both sides). A drifted scale adds dscale * |x_side / |x_side||."""
    s = scale.abs().view(1, -1, 1, 1)
    denom, deviation, unbounded = l2norm_parts(x, dx)
    own = gamma(x.shape[1]) / 2 + ULPS * u()
    bound = own * out.abs() + s * deviation
    if dscale is not None:
        ds = dscale.view(1, -1, 1, 1)
        bound += (1 + own) * ds * (x.abs() / denom + deviation)
        s = s + ds
    return torch.where(unbounded, 2 * s.expand_as(bound), bound)


def join(head_outputs: list, columns: int):
    """The head's join, as torchvision's SSDScoringHead does it: [(B, A*columns, H, W)] per source ->
    (B, sum(H*W*A), columns). Exact: a copy."""
    results = []
    for value in head_outputs:
        n, _, h, w = value.shape
        results.append(value.view(n, -1, columns, h, w).permute(0, 3, 4, 1, 2).reshape(n, -1, columns))
    return torch.cat(results, dim=1)


def split(joined, shapes: list):
    """The inverse of join: (B, P, columns) -> [(B, A*columns, H, W)] with the given shapes."""
    parts, start = [], 0
    n, _, columns = joined.shape
    for _, channels, h, w in shapes:
        anchors = channels // columns
        count = h * w * anchors
        part = joined[:, start:start + count].reshape(n, h, w, anchors, columns).permute(0, 3, 4, 1, 2)
        parts.append(part.reshape(n, channels, h, w))
        start += count
    return parts

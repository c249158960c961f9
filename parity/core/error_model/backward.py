"""Per-element bounds of the backward stages. A tap's gradient is one sum over the terms every consumer sends
it (each conv's products of output gradients and weights, each pool's routed gradients, the L2Norm's), so its own
rounding is gamma(total terms) times the sum of their magnitudes whatever the order and grouping a port adds
them in (paired head convs, separate ones, consumers in any order); the propagated part is each consumer's
stage applied to the side's deviations. Arguments are float64 tensors."""

import math

import torch
import torch.nn.functional as F
from torch.nn.grad import conv2d_input, conv2d_weight

from . import typical
from .forward import L2NORM_EPS, l2norm_parts
from .rounding import ULPS, gamma, magnitudes, per_image, u


def conv_terms(weight) -> int:
    """Terms one conv adds into each element of its input's gradient: OC * KH * KW (the stride-2 ones fewer)."""
    return weight.shape[0] * weight[0, 0].numel()


def conv_input(module, input_shape, weight, grad, dgrad, g, dweight=None):
    """grad, dgrad (B,OC,OH,OW) the output gradient after the ReLU's mask and its deviation, weight (OC,C,KH,KW), g
    the gamma of the whole sum the input gradient's elements are, dweight the side's drift from weight (a training
    trajectory) or None -> (B,C,H,W): |W| applied to g |grad| + (1+g) dgrad as the conv's input gradient applies W (a
    transposed convolution), and a drifted weight's |E| to (1+g) (|grad| + dgrad)."""
    one_image, terms = (1, *input_shape[1:]), conv_terms(weight)
    transposed = lambda w, v: conv2d_input(one_image, w, v, module.stride, module.padding, module.dilation)
    weight = weight.abs()
    bound = per_image(lambda v: magnitudes(transposed, weight, v, terms=terms), g * grad.abs() + (1 + g) * dgrad)
    if dweight is not None:
        bound += per_image(lambda v: magnitudes(transposed, dweight, v, terms=terms), (1 + g) * (grad.abs() + dgrad))
    return bound


def conv_weight(module, x, dx, weight_shape, grad, dgrad):
    """x, dx (B,C,H,W), grad, dgrad (B,OC,OH,OW) the output gradient after the ReLU's mask -> (OC,C,KH,KW).

    fl(sum x_side * g_side) over n = B*OH*OW products is within gamma(n) sum |x_side||g_side| of the exact sum of the
    side's operands, which is within dx*|g_side| + |x|*dg of the oracle's: with |x_side| <= |x|+dx, |g_side| <=
    |g|+dg, the whole is (|x|+dx) (*) (gamma |g| + (1+gamma) dg) + dx (*) |g| (every product summed as a
    correlation)."""
    g = gamma(grad.shape[0] * grad[0, 0].numel())
    terms = grad[0, 0].numel()  # one image's products: the sum over the batch is per_image's, in float64
    correlation = lambda x, v: conv2d_weight(x, weight_shape, v, module.stride, module.padding, module.dilation)

    def one_image(x, dx, grad, dgrad):
        bound = magnitudes(correlation, x.abs() + dx, g * grad.abs() + (1 + g) * dgrad, terms=terms)
        if dx.any():
            bound += magnitudes(correlation, dx, grad.abs(), terms=terms)
        return bound

    return per_image(one_image, x, dx, grad, dgrad, combine="sum")


def conv_bias(grad, dgrad):
    """grad, dgrad (B,OC,OH,OW) -> (OC): a sum of B*OH*OW terms."""
    g = gamma(grad.shape[0] * grad[0, 0].numel())
    return g * grad.abs().sum(dim=(0, 2, 3)) + (1 + g) * dgrad.sum(dim=(0, 2, 3))


def pool_scatter(argmax, values, input_shape):
    """argmax (B,C,OH,OW) flat index into each H*W plane, values (B,C,OH,OW) -> (B,C,H,W): each window's value added
    at its chosen element (max-pool backward; windows may overlap)."""
    b, c, h, w = input_shape
    out = torch.zeros((b, c, h * w), dtype=values.dtype)
    out.scatter_add_(2, argmax.reshape(b, c, -1), values.reshape(b, c, -1))
    return out.view(b, c, h, w)


def pool_undecided(module, x, dx, values):
    """x, dx (B,C,H,W) the pool's input and its deviation, values (B,C,OH,OW) |gradient| + deviation at its output
    -> (B,C,H,W): for a side whose window choices are unknown, each window where more than one element is within
    2 max(dx) of the maximum may have sent its gradient to any of them: its value added at every such candidate."""
    b, c, h, w = x.shape
    k, stride, pad = module.kernel_size, module.stride, module.padding
    oh, ow = values.shape[2:]
    # Padding as the pool sees it: `pad` on each side, and on the bottom and right what ceil_mode's last window adds.
    sides = (pad, max(pad, (ow - 1) * stride + k - w - pad), pad, max(pad, (oh - 1) * stride + k - h - pad))
    padded_h, padded_w = h + sides[2] + sides[3], w + sides[0] + sides[1]
    windows = F.unfold(F.pad(x.reshape(b * c, 1, h, w), sides, value=-torch.inf), k, stride=stride)  # (BC,k*k,OH*OW)
    spread = F.unfold(F.pad(dx.reshape(b * c, 1, h, w), sides), k, stride=stride).amax(dim=1, keepdim=True)
    candidates = windows >= windows.amax(dim=1, keepdim=True) - 2 * spread
    candidates &= candidates.sum(dim=1, keepdim=True) > 1
    added = candidates.to(values.dtype) * values.reshape(b * c, 1, -1)
    folded = F.fold(added, (padded_h, padded_w), k, stride=stride)
    return folded[:, :, sides[2]:sides[2] + h, sides[0]:sides[0] + w].reshape(b, c, h, w)


def l2norm_input(x, dx, scale, grad, dgrad, g_total, dscale=None):
    """x, dx (B,C,H,W) the L2Norm's input, scale (C), grad, dgrad (B,C,H,W) of the L2Norm's output, g_total the gamma of the
    tap gradient's whole sum, dscale (C) the side's scale's drift from the oracle's or None -> (B,C,H,W): this
    consumer's internal rounding and propagated deviation, plus g_total times the magnitude of what it adds to the
    sum.

    autograd's gradient of scale * x / max(|x|, eps): s g / d - x (sum_c s g x) / (d^2 |x|) where d = max(|x|, eps),
    the second term only where |x| >= eps. Own: the inner sum of C terms, the norm's error e_d (relative, gamma(C)/2
    + 2u) taken once in the first term and three times in the second; propagated: its derivative in g and in x
    (first order, with |g| + dg for the second order)."""
    s = scale.view(1, -1, 1, 1)
    denom, _, unbounded = l2norm_parts(x, dx)
    unclamped = (x.norm(dim=1, keepdim=True) >= L2NORM_EPS).to(x.dtype)
    xa = x.abs() + dx
    if dscale is not None:  # s and g enter only as their product: a drifted scale is a deviation of s * g
        dgrad = dgrad + dscale.view(1, -1, 1, 1) * (grad.abs() + dgrad) / s.abs()
    sg = (s * grad).abs() + s.abs() * dgrad
    inner = (s * grad * x).sum(dim=1, keepdim=True).abs()
    inner_abs = (xa * sg).sum(dim=1, keepdim=True)
    e_d = gamma(x.shape[1]) / 2 + 2 * u()
    second = unclamped * xa / denom ** 3
    magnitude = sg / denom + second * inner_abs
    own = (sg / denom) * (ULPS * u() + e_d) + second * (gamma(x.shape[1] + 1) * inner_abs + inner * (3 * e_d + ULPS * u()))
    from_grad = s.abs() * dgrad / denom + second * (xa * s.abs() * dgrad).sum(dim=1, keepdim=True)
    xhat_dx = (xa / denom * dx).sum(dim=1, keepdim=True)
    from_x = unclamped * (sg * xhat_dx / denom ** 2 + dx * inner_abs / denom ** 3
                          + xa * (sg * dx).sum(dim=1, keepdim=True) / denom ** 3 + 3 * xa * inner_abs * xhat_dx / denom ** 4)
    bound = 2 * own + from_grad + 2 * from_x + g_total * magnitude
    return torch.where(unbounded, torch.full_like(bound, torch.inf), bound)


def l2norm_scale(x, dx, grad, dgrad):
    """-> (C) bound on d loss / d scale = sum over B*H*W of g x / d: gamma of that many terms, the norm's error,
    and the deviations of g and of x / |x| (forward.l2norm_parts)."""
    denom, deviation, unbounded = l2norm_parts(x, dx)
    xhat = x.abs() / denom
    terms = grad.abs() * xhat
    g = gamma(x.shape[0] * x[0, 0].numel())
    e_d = gamma(x.shape[1]) / 2 + 2 * u()
    propagated = dgrad * (xhat + deviation) + grad.abs() * deviation
    per_pixel = (g + 2 * (e_d + ULPS * u())) * terms + propagated
    per_pixel = torch.where(unbounded, torch.full_like(per_pixel, torch.inf), per_pixel)
    return per_pixel.sum(dim=(0, 2, 3))


def conv_weight_typical(module, x, grad, rows, cols):
    """x (B,C,H,W) the conv's input, grad (B,OC,OH,OW) its output gradient after the ReLU's mask (float32 or 64,
    taken in float64 one image at a time), rows and cols the output and input channels judged -> (exact
    (R,K,KH,KW): those elements of the weight gradient; the typical-error model's variance of a float32 evaluation
    of them, per element; typical.py derives it).

    Each element sums B*OH*OW products x*g, m of them nonzero (a zero product adds exactly). A weight gradient's
    terms come in pixel order, and neighbouring pixels' terms are alike: a plain loop in raster order (image, row,
    column) may carry partial sums far larger than a random order's bridge (a feature in the image's top half).
    The variance is the larger of the random-order model's and that loop's: the sum over its additions of the
    partial sum's square, u^2/3 sum_k s_k^2, with each output row's n nonzero terms (row sum r, squares q) a
    random bridge on top of the rows before (prefix S): n S^2 + (n+1) S r + (n+1)/6 q + (n+2)/3 r^2 per row. A
    blocked sum (GEMM panels, per-image partials) adds in raster order within and across its blocks and sits below
    both (measured: a plain raster loop at 0.7-0.8 of the model; in the SSD300 PyTorch's largest margin 0.32, the
    native port's 0.31)."""
    kh, kw = module.kernel_size
    (sh, sw), (dh, dw) = module.stride, module.dilation
    oh, ow = grad.shape[2:]
    shape = (len(rows), len(cols), kh, kw)
    flat = (len(rows), len(cols) * kh * kw)
    running, squares, terms, path = (torch.zeros(flat, dtype=torch.float64) for _ in range(4))
    per_row = lambda a, b: torch.einsum("ryx,kyx->rky", a, b)  # (R,OH,OW), (K,OH,OW) -> (R,K,OH): sums over a row
    for b in range(x.shape[0]):  # one image's float64 copies at a time
        padded = F.pad(x[b, cols].double(), (module.padding[1],) * 2 + (module.padding[0],) * 2)
        # what each output pixel's (i, j) tap reads: (K*KH*KW, OH, OW), in the weight's (input channel, i, j) order
        taps = torch.stack([padded[:, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
                            for i in range(kh) for j in range(kw)], dim=1).flatten(0, 1)
        g = grad[b, rows].double()
        row_sum, row_squares = per_row(g, taps), per_row(g * g, taps * taps)
        row_terms = per_row((g != 0).double(), (taps != 0).double())
        prefix = running[..., None] + row_sum.cumsum(dim=2) - row_sum
        path += (row_terms * prefix * prefix + (row_terms + 1) * prefix * row_sum
                 + (row_terms + 1) / 6 * row_squares + (row_terms + 2) / 3 * row_sum * row_sum).sum(dim=2)
        running += row_sum.sum(dim=2)
        squares += row_squares.sum(dim=2)
        terms += row_terms.sum(dim=2)
    running, squares, terms, path = (t.view(shape) for t in (running, squares, terms, path))
    raster = u() * u() / 3 * (path + squares) + terms * (typical.FLOAT32_TINY * typical.FLOAT32_TINY)
    return running, torch.maximum(typical.sum_variance(terms, squares, running), raster)


def conv_input_typical(consumers, input_shape, chosen):
    """consumers [(module, weight (OC,C,KH,KW) float64, grad (B,OC,OH,OW) after the ReLU's mask, taken in float64 one
    image at a time)]: every conv that reads one tap; input_shape (B,C,H,W) the tap's; chosen the tap's channels
    judged -> (exact (B,K,H,W): those channels of the tap's gradient, the sum of every consumer's input gradient;
    the typical-error model's variance of a float32 evaluation, per element).

    Each element is one sum of the terms every consumer sends it (OC * KH * KW products per conv, fewer at the
    border and under a stride), added in any order: one random-order sum over all of them (typical.py), with
    sum t^2 the transposed convolutions of g^2 with W^2 and m their count of nonzero products. Only the exact sum
    needs float64; the model's sums of squares and counts run in float32 (three times faster), on operands scaled
    by powers of two to a largest value of 1. An element whose scaled sum of squares falls below _SQUARES_FLOOR
    (every term under 2^-50 of the largest: float32 may have flushed some of them) is left out of the verdict
    (variance 0)."""
    rows = torch.as_tensor(chosen)
    one_image = (1, len(rows), *input_shape[2:])
    exact, variance = [], []
    for b in range(input_shape[0]):  # one image's float64 temporaries at a time
        value = squares = terms = floor = 0
        for module, weight, grad in consumers:
            weight, g = weight[:, rows], grad[b:b + 1].double()
            transposed = lambda w, v: conv2d_input(one_image, w, v, module.stride, module.padding, module.dilation)
            value = value + transposed(weight, g)
            (w, w_scale), (v, v_scale) = _unit_scaled(weight), _unit_scaled(g)
            squares = squares + transposed((w * w).float(), (v * v).float()).double() * (w_scale * v_scale) ** 2
            terms = terms + transposed((w != 0).float(), (v != 0).float()).double()
            floor = max(floor, _SQUARES_FLOOR * (w_scale * v_scale) ** 2)
        model = typical.sum_variance(terms, squares, value)
        variance.append(torch.where(squares < floor, torch.zeros_like(model), model))
        exact.append(value)
    return torch.cat(exact), torch.cat(variance)


_SQUARES_FLOOR = 2.0 ** -100  # far above float32's 2^-126 below which a square may be flushed


def _unit_scaled(values):
    """-> (values / s, s) with s the power of two at or above the largest |value| (1 for all zeros): exact."""
    largest = float(values.abs().max()) if values.numel() else 0.0
    scale = 2.0 ** math.ceil(math.log2(largest)) if largest > 0 else 1.0
    return values / scale, scale

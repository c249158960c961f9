"""Per-element bounds of BatchNorm in training mode (batch statistics), its backward and its running statistics.
Arguments are float64 tensors: x (B,C,H,W) the oracle's input, dx its measured deviation on the side judged,
gamma and beta (C) the exact affine parameters. Per channel, over its n = B*H*W elements:

    m = mean(x),  v = mean((x - m)^2),  s = 1 / sqrt(v + eps),  y = gamma * (x - m) * s + beta

A side computes these from its own input x + e (|e| = dx): its exact statistics are within (measured, rigorous)

    |m~ - m| <= mean(dx),   |v~ - v| <= Dv = 2 mean(|x - m| dx) + mean(dx^2)

and its own rounding adds, in any order of summation (two passes, or Welford's with its combining steps):
mean within gamma(n+1) mean(|x|), the variance within gamma(n+4) of its terms plus the mean's error squared, the
inverse square root a few ulps more. Bounds use the upper ends of every interval (s at v - Dv, say), so products of
deviations are covered, not dropped."""

from dataclasses import dataclass

import torch

from .rounding import ULPS, gamma, u

CHANNELS = (0, 2, 3)


def _mean(t):
    return t.mean(dim=CHANNELS, keepdim=True)


@dataclass
class Statistics:
    """One BatchNorm's batch statistics (each (1,C,1,1)) and the side's deviation from them."""

    count: int  # n, elements per channel
    centred: torch.Tensor  # x - m (B,C,H,W)
    mean: torch.Tensor
    var: torch.Tensor  # biased, as the forward normalizes with
    invstd: torch.Tensor
    dmean: torch.Tensor  # bound on |m^ - m|: the side's input deviation and its own rounding
    dvar: torch.Tensor  # bound on |v^ - v|
    dinvstd: torch.Tensor  # bound on |s^ - s|


def statistics(x, dx, eps: float) -> Statistics:
    count = x.shape[0] * x.shape[2] * x.shape[3]
    mean = _mean(x)
    centred = x - mean
    var = _mean(centred * centred)
    carried_var = 2 * _mean(centred.abs() * dx) + _mean(dx * dx)
    var_high = var + carried_var
    own_mean = gamma(count + 1) * _mean(x.abs() + dx)
    own_var = gamma(count + 4) * (var_high + 2 * var_high.sqrt() * own_mean + own_mean ** 2) + own_mean ** 2
    dvar = carried_var + own_var
    low, high = (var - dvar).clamp_min(0) + eps, var + dvar + eps
    invstd = (var + eps).rsqrt()
    # s^ = (1 / sqrt)(v^ + eps) with a few roundings: within the interval's ends, widened by them
    dinvstd = torch.maximum(low.rsqrt() - invstd, invstd - high.rsqrt()) + (ULPS + 2) * u() * low.rsqrt()
    dinvstd = torch.where(dvar < (var + eps) / 2, dinvstd, torch.full_like(dinvstd, torch.inf))
    return Statistics(count, centred, mean, var, invstd, _mean(dx) + own_mean, dvar, dinvstd)


def _channel(t):
    return t.view(1, -1, 1, 1)


def _normalized(stats: Statistics, dx):
    """-> (x^ = (x - m) s, a bound on the side's |x^ - x^_oracle|): (dx + dm) (s + ds) + |x - m| ds."""
    invstd_high = stats.invstd + stats.dinvstd
    return stats.centred * stats.invstd, (dx + stats.dmean) * invstd_high + stats.centred.abs() * stats.dinvstd


def forward(x, dx, weight, bias, out, eps: float):
    """-> (B,C,H,W) bound on the side's output. The elementwise part as either (x - m) * s * gamma + beta or
    x * a + (beta - m * a) with a = s * gamma: 4 roundings of (|x| + |m|) |a|, 2 of |beta| + |y|."""
    stats = statistics(x, dx, eps)
    g, b = _channel(weight).abs(), _channel(bias).abs()
    _, dxhat = _normalized(stats, dx)
    scale_high = g * (stats.invstd + stats.dinvstd)
    own = 4 * u() * (x.abs() + dx + stats.mean.abs() + stats.dmean) * scale_high + 2 * u() * (b + out.abs())
    return g * dxhat + own


def running(x, dx, running_mean, running_var, eps: float, momentum: float) -> tuple:
    """running_mean, running_var (C) before the step -> bounds (C) on the side's values after it:
    (1 - momentum) * running + momentum * batch statistic, the variance unbiased (n / (n - 1)); momentum and
    1 - momentum held in float32 (a relative u each)."""
    stats = statistics(x, dx, eps)
    unbias = stats.count / max(stats.count - 1, 1)
    batch_mean, dmean = stats.mean.flatten(), stats.dmean.flatten()
    batch_var, dvar = stats.var.flatten() * unbias, stats.dvar.flatten() * unbias
    keep = 1 - momentum

    def update(old, value, deviation):
        new = keep * old + momentum * value
        return momentum * deviation + 3 * u() * (keep * old.abs() + momentum * (value.abs() + deviation)) + u() * new.abs()

    return update(running_mean, batch_mean, dmean), update(running_var, batch_var, dvar + u() * batch_var.abs())


def backward(x, dx, weight, grad, dgrad, eps: float) -> tuple:
    """grad, dgrad (B,C,H,W) the output gradient and its deviation -> bounds on (input gradient (B,C,H,W), weight
    gradient (C), bias gradient (C)), of

        dx = gamma s (g - A - x^ B),  A = mean(g),  B = mean(g x^);   dgamma = n B,  dbeta = n A."""
    stats = statistics(x, dx, eps)
    n = stats.count
    xhat, dxhat = _normalized(stats, dx)
    grad_abs = grad.abs()
    a, b = _mean(grad), _mean(grad * xhat)
    da = _mean(dgrad) + gamma(n + 1) * _mean(grad_abs + dgrad)
    xhat_high = xhat.abs() + dxhat
    db = _mean(dgrad * xhat_high + grad_abs * dxhat) + gamma(n + 4) * _mean((grad_abs + dgrad) * xhat_high)
    g = _channel(weight).abs()
    invstd_high = stats.invstd + stats.dinvstd
    inner = (grad - a - xhat * b).abs()
    carried = g * (invstd_high * (dgrad + da + dxhat * (b.abs() + db) + xhat.abs() * db) + stats.dinvstd * inner)
    own = 4 * u() * g * invstd_high * (grad_abs + dgrad + a.abs() + da + xhat_high * (b.abs() + db))
    return carried + own, (n * db).flatten(), (n * da).flatten()

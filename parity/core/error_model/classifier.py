"""Per-element bounds of a classifier's end: global average pooling, a fully connected layer, their backwards.
Arguments are float64 tensors: oracle values, exact weights, measured deviations (d*)."""

from .rounding import gamma, u


def avgpool(x, dx):
    """x, dx (B,C,H,W) -> (B,C): a mean of H*W terms."""
    count = x.shape[2] * x.shape[3]
    g = gamma(count + 1)
    return g * x.abs().mean(dim=(2, 3)) + (1 + g) * dx.mean(dim=(2, 3))


def avgpool_input(grad, dgrad, shape):
    """grad, dgrad (B,C) of the pooled output -> (B,C,H,W): each element gets grad / (H*W), one rounding."""
    count = shape[2] * shape[3]
    per_element = (u() * grad.abs() + (1 + u()) * dgrad) / count
    return per_element[:, :, None, None].expand(shape).clone()


def linear(x, dx, weight, bias):
    """x, dx (B,I), weight (O,I), bias (O) -> (B,O): a sum of I products and the bias."""
    g = gamma(x.shape[1] + 1)
    w = weight.abs()
    return g * (x.abs() @ w.T + bias.abs()) + (1 + g) * dx @ w.T


def linear_input(grad, dgrad, weight, g_total):
    """grad, dgrad (B,O), weight (O,I), g_total the gamma of the input gradient's whole sum -> (B,I)."""
    w = weight.abs()
    return (g_total * grad.abs() + (1 + g_total) * dgrad) @ w


def linear_weight(x, dx, grad, dgrad) -> tuple:
    """-> bounds on (weight gradient (O,I), bias gradient (O)): sums over the batch of grad^T x and of grad."""
    g = gamma(x.shape[0])
    weight = g * grad.abs().T @ x.abs() + (1 + g) * (dgrad.T @ (x.abs() + dx) + grad.abs().T @ dx)
    return weight, g * grad.abs().sum(dim=0) + (1 + g) * dgrad.sum(dim=0)

"""rounding.magnitudes: a convolution of magnitudes evaluated in float32 and widened is never below its exact value
(the float64 evaluation, whose own error is 1e-13 of it here), and is within n*u of it; near float32's overflow or on
a non-finite operand it is the float64 evaluation itself."""

import torch
import torch.nn.functional as F
from torch.nn.grad import conv2d_weight

from parity.core.error_model.rounding import FLOAT32_U, magnitudes

FLOAT64_SLACK = 1e-12  # the float64 evaluation's own relative error here is below 1e-13 (n at most 1600)


def _operands(seed: int):
    generator = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.rand(*shape, dtype=torch.float64, generator=generator)
    # magnitudes over many decades, as activations and deviations have
    x = rand(1, 16, 40, 40) * 10.0 ** (-12 * rand(1, 16, 40, 40))
    return x, rand(8, 16, 3, 3), rand(8)


def convolve(x, w, b):
    return F.conv2d(x, w, b, padding=1)


def test_the_widened_float32_convolution_bounds_the_exact_one_from_above():
    x, w, b = _operands(0)
    exact = convolve(x, w, b)
    bound = magnitudes(convolve, x, w, b, terms=16 * 9 + 1)
    assert bound.dtype == torch.float64
    assert bool((bound >= exact * (1 + FLOAT64_SLACK)).all())
    assert bool((bound <= exact * (1 + 4 * (16 * 9 + 3) * FLOAT32_U) + 1e-30).all())
    # the widening is what makes it a bound: the plain float32 result falls below the exact one somewhere
    plain = convolve(x.float(), w.float(), b.float()).double()
    assert bool((plain < exact).any())


def test_a_weight_gradient_of_many_terms_is_bounded_too():
    x, _, _ = _operands(1)
    grad = _operands(2)[0][:, :8]
    correlation = lambda x, g: conv2d_weight(x, (8, 16, 3, 3), g, 1, 1)
    exact = correlation(x, grad)
    bound = magnitudes(correlation, x, grad, terms=40 * 40)
    assert bool((bound >= exact * (1 + FLOAT64_SLACK)).all())
    assert bool((bound <= exact * (1 + 4 * 1603 * FLOAT32_U)).all())


def test_near_overflow_or_non_finite_it_is_the_float64_evaluation():
    x, w, b = _operands(3)
    for huge in (x * 1e35, torch.where(x > 0.5, torch.inf, x)):
        assert torch.equal(magnitudes(convolve, huge, w, b, terms=145), convolve(huge, w, b))

"""The bounds a training trajectory adds to the error model: SGD's update (parity/core/error_model/sgd.py) and a side's
drifted weights as one more input deviation of every stage with parameters. PyTorch's own float32 passes each of
them, and each fails on an injected change beyond rounding (or, for the drift terms, without them)."""

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.grad import conv2d_input

from parity.core.error_model import backward, forward, sgd
from parity.core.error_model.rounding import gamma

SGD = {"lr": 1e-2, "momentum": 0.9, "weight_decay": 5e-4}


def _oracle_and_side(rng, shape, drift):
    """A float64 value and a float32 side's copy of it, off by a relative `drift` (and its rounding)."""
    oracle = rng.standard_normal(shape)
    side = (oracle * (1 + drift * rng.standard_normal(shape))).astype(np.float32)
    return oracle, side


def _torch_update(p, g, b, dtype, **options):
    """torch.optim.SGD's update of p from gradient g and momentum buffer b (None: the first step) -> (b', p')."""
    param = torch.nn.Parameter(torch.tensor(p, dtype=dtype))
    param.grad = torch.tensor(g, dtype=dtype)
    optimizer = torch.optim.SGD([param], **options)
    if b is not None:
        optimizer.state[param]["momentum_buffer"] = torch.tensor(b, dtype=dtype)
    optimizer.step()
    return optimizer.state[param]["momentum_buffer"].numpy(), param.detach().numpy()


def _update_errors(seed, first, drift, **side_options):
    """-> (|side - oracle| and the bound, for the buffer and the parameter after one update)."""
    rng = np.random.default_rng(seed)
    (p, p32), (g, g32), (b, b32) = (_oracle_and_side(rng, 4096, drift) for _ in range(3))
    b, b32 = (None, None) if first else (b, b32)
    new_b, new_p = _torch_update(p, g, b, torch.float64, **SGD)
    side_b, side_p = _torch_update(p32, g32, b32, torch.float32, **{**SGD, **side_options})
    dp, dg = np.abs(p32 - p), np.abs(g32 - g)
    db = None if first else np.abs(b32 - b)
    bound_b, bound_p = sgd.update(p, dp, b, db, g, dg, SGD["lr"], SGD["momentum"], SGD["weight_decay"])
    return (np.abs(side_b - new_b), bound_b), (np.abs(side_p - new_p), bound_p)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), first=st.booleans(), drift=st.sampled_from([0.0, 1e-7, 1e-4]))
def test_torch_float32_sgd_stays_within_the_update_bound(seed, first, drift):
    for error, bound in _update_errors(seed, first, drift):
        assert (error <= bound).all(), float(np.max(error / bound))


def test_nesterov_momentum_where_the_reference_has_plain_fails_the_parameter_bound():
    (buffer_error, buffer_bound), (param_error, param_bound) = _update_errors(0, False, 1e-7, nesterov=True)
    assert (buffer_error <= buffer_bound).all()
    assert np.max(param_error / param_bound) > 10


def test_a_learning_rate_off_by_a_relative_1e_4_fails_the_parameter_bound():
    _, (error, bound) = _update_errors(1, False, 0.0, lr=SGD["lr"] * (1 + 1e-4))
    assert np.max(error / bound) > 1


def test_a_convolution_with_drifted_weights_is_within_its_bound_only_with_the_drift_carried():
    rng = np.random.default_rng(2)
    (x, x32), (w, w32), (bias, bias32) = (_oracle_and_side(rng, shape, drift) for shape, drift in
                                          (((2, 8, 12, 12), 0.0), ((6, 8, 3, 3), 1e-5), ((6,), 1e-5)))
    conv = torch.nn.Conv2d(8, 6, 3, padding=1)
    x, w, bias = (torch.from_numpy(a) for a in (x, w, bias))
    side = F.conv2d(*(torch.from_numpy(a) for a in (x32, w32, bias32)), padding=1).double()
    error = (side - F.conv2d(x, w, bias, padding=1)).abs()
    dx, dw, dbias = ((torch.from_numpy(a).double() - o).abs() for a, o in ((x32, x), (w32, w), (bias32, bias)))
    assert (error <= forward.conv(conv, x, dx, w, bias, dw, dbias)).all()
    assert (error > forward.conv(conv, x, dx, w, bias)).any()


def test_a_convolution_input_gradient_with_drifted_weights_is_within_its_bound_only_with_the_drift_carried():
    rng = np.random.default_rng(3)
    (grad, grad32), (w, w32) = (_oracle_and_side(rng, shape, 1e-5) for shape in ((2, 6, 12, 12), (6, 8, 3, 3)))
    conv, shape = torch.nn.Conv2d(8, 6, 3, padding=1), (2, 8, 12, 12)
    grad, w = torch.from_numpy(grad), torch.from_numpy(w)
    side = conv2d_input(shape, torch.from_numpy(w32), torch.from_numpy(grad32), padding=1).double()
    error = (side - conv2d_input(shape, w, grad, padding=1)).abs()
    dgrad, dw = (torch.from_numpy(grad32).double() - grad).abs(), (torch.from_numpy(w32).double() - w).abs()
    g = gamma(backward.conv_terms(w))
    assert (error <= backward.conv_input(conv, shape, w, grad, dgrad, g, dw)).all()
    assert (error > backward.conv_input(conv, shape, w, grad, dgrad, g)).any()


def _l2norm(x, scale):
    return scale.view(1, -1, 1, 1) * F.normalize(x, dim=1)


def test_an_l2norm_with_a_drifted_scale_is_within_its_bound_only_with_the_drift_carried():
    rng = np.random.default_rng(4)
    (x, x32), (scale, scale32) = (_oracle_and_side(rng, shape, 1e-5) for shape in ((2, 16, 5, 5), (16,)))
    x, scale = torch.from_numpy(x), torch.from_numpy(scale)
    out = _l2norm(x, scale)
    error = (_l2norm(torch.from_numpy(x32), torch.from_numpy(scale32)).double() - out).abs()
    dx, dscale = (torch.from_numpy(x32).double() - x).abs(), (torch.from_numpy(scale32).double() - scale).abs()
    assert (error <= forward.l2norm(x, dx, scale, out, dscale)).all()
    assert (error > forward.l2norm(x, dx, scale, out)).any()


def test_an_l2norm_input_gradient_with_a_drifted_scale_is_within_its_bound_only_with_the_drift_carried():
    rng = np.random.default_rng(5)
    (x, x32), (scale, scale32), (grad, grad32) = (_oracle_and_side(rng, shape, 1e-5)
                                                  for shape in ((2, 16, 5, 5), (16,), (2, 16, 5, 5)))

    def input_gradient(x, scale, grad):
        x = x.clone().requires_grad_(True)
        _l2norm(x, scale).backward(grad)
        return x.grad

    x, scale, grad = (torch.from_numpy(a) for a in (x, scale, grad))
    side = input_gradient(*(torch.from_numpy(a) for a in (x32, scale32, grad32))).double()
    error = (side - input_gradient(x, scale, grad)).abs()
    dx, dscale, dgrad = ((torch.from_numpy(a).double() - o).abs() for a, o in ((x32, x), (scale32, scale), (grad32, grad)))
    g = gamma(1)
    assert (error <= backward.l2norm_input(x, dx, scale, grad, dgrad, g, dscale)).all()
    assert (error > backward.l2norm_input(x, dx, scale, grad, dgrad, g)).any()

"""The routed ReLU and max-pool (models/ssd300/reference/routing.py): torch's own forward and backward when no
routing is set, and the gradient sent where the routing says when it is set after the forward."""

import torch
from torch import nn

from models.ssd300.reference.routing import Routing, install_routing


def _run(module: nn.Module, x: torch.Tensor, routing: Routing, entry=None) -> tuple:
    """Forward through the routed module, then set `entry` (as a parity run does after finding ties), backward."""
    x = x.clone().requires_grad_(True)
    handles = install_routing({module: "tap"}, routing)
    try:
        out = module(x)
    finally:
        for handle in handles:
            handle.remove()
    if entry is not None:
        routing.entries["tap"] = entry
    grad = torch.arange(1.0, out.numel() + 1, dtype=x.dtype).view_as(out)
    out.backward(grad)
    return out.detach(), x.grad


def test_unrouted_functions_are_torchs_own_bit_for_bit():
    x = torch.randn(2, 3, 9, 9, dtype=torch.float64)
    for module in (nn.ReLU(), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2, ceil_mode=True), nn.MaxPool2d(3, 1, 1)):
        out, grad = _run(module, x, Routing())
        plain_x = x.clone().requires_grad_(True)
        plain = module(plain_x * 1)  # an in-place ReLU may not modify a leaf
        plain.backward(torch.arange(1.0, plain.numel() + 1, dtype=x.dtype).view_as(plain))
        assert torch.equal(out, plain.detach()) and torch.equal(grad, plain_x.grad), module


def test_a_routed_pool_window_sends_its_gradient_to_the_forced_element():
    x = torch.zeros(1, 1, 2, 2, dtype=torch.float64)
    x[0, 0, 0, 0] = x[0, 0, 1, 1] = 1.0  # a tie: torch takes the first maximum, flat index 0
    pool = nn.MaxPool2d(2, 2)
    _, own = _run(pool, x, Routing())
    assert own[0, 0, 0, 0] == 1.0 and own[0, 0, 1, 1] == 0.0
    forced = torch.full((1, 1, 1, 1), 3)  # flat index 3 = (1, 1)
    out, routed = _run(pool, x, Routing(), ("pool", forced, torch.ones(1, 1, 1, 1, dtype=torch.bool)))
    assert out.item() == 1.0  # the forward value is the reference's own
    assert routed[0, 0, 0, 0] == 0.0 and routed[0, 0, 1, 1] == 1.0


def test_installed_routing_is_removed():
    module = nn.ReLU(inplace=True)
    for handle in install_routing({module: "tap"}, Routing()):
        handle.remove()
    assert "forward" not in vars(module) and module(torch.tensor([-1.0, 2.0])).tolist() == [0.0, 2.0]


def test_a_routed_relu_passes_or_blocks_the_gradient_where_told():
    x = torch.tensor([-1e-9, 2.0, 3.0, -4.0], dtype=torch.float64)
    force_pass = torch.tensor([True, False, False, False])
    force_block = torch.tensor([False, True, False, False])
    out, grad = _run(nn.ReLU(), x, Routing(), ("relu", force_pass, force_block))
    assert torch.equal(out, torch.relu(x))
    assert grad.tolist() == [1.0, 0.0, 3.0, 0.0]

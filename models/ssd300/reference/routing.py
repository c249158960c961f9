"""Decisions that rounding can flip: which element a max-pool window passes on, whether a ReLU passes its
input, and which of several equal losses a hard-negative selection takes. Each also decides where the gradient
flows.

Where a pooling window holds two elements equal up to float32 rounding, or a ReLU input is zero up to rounding,
the choice is decided by rounding noise: a correct port may decide the other way, and every gradient upstream
then differs from the reference's by far more than rounding. The harness finds such near-ties after the
reference's forward and runs its backward with the port's decision at exactly those places (../routing_ties.py),
so that gradients are compared like for like and the ties are reported, not hidden. A decision that is not a
near-tie is never replayed. The forward runs once: only the gradient's route (and, for mining and matching, the
loss, which is cheap to recompute) follows the port.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.utils import _pair

POOL_INPUTS = {
    "backbone.pool1": "backbone.conv1_2",
    "backbone.pool2": "backbone.conv2_2",
    "backbone.pool3": "backbone.conv3_3",
    "backbone.pool4": "backbone.conv4_3",
    "backbone.pool5": "backbone.conv5_3",
}


def window_argmax(pool: nn.MaxPool2d, x: torch.Tensor) -> torch.Tensor:
    """x (B,C,H,W) -> (B,C,OH,OW) flat index into each H*W plane of the element each window takes
    (torch's rule: the first maximum in scan order)."""
    return F.max_pool2d(x, pool.kernel_size, pool.stride, pool.padding, pool.dilation, pool.ceil_mode, return_indices=True)[1]


class Routing:
    """The near-tie decisions a reference step's backward takes (tap -> replay entry), set between its forward and
    its backward: the forward runs once, the ties are found against it, and only the gradient's route changes.

    Entries: ("pool", forced, mask): the window passes its gradient to element `forced` (flat index into its H*W
    plane) where `mask` is set; ("relu", force_pass, force_block): the ReLU passes the gradient where `force_pass`
    is set and blocks it where `force_block` is set. Elsewhere each layer routes as torch's own backward does.
    The forward values stay the reference's own: at a near-tie they differ from the other side's by rounding."""

    def __init__(self):
        self.entries = {}


class _RoutedReLU(torch.autograd.Function):
    """torch.relu, with a backward that follows the step's Routing at its tap."""

    @staticmethod
    def forward(ctx, x, routing, tap):
        out = torch.relu(x)
        ctx.save_for_backward(out)
        ctx.routing, ctx.tap = routing, tap
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        passes = out > 0  # torch's threshold_backward: the gradient passes where the output is positive
        entry = ctx.routing.entries.get(ctx.tap)
        if entry is not None:
            _, force_pass, force_block = entry
            passes = (passes | force_pass) & ~force_block
        return torch.where(passes, grad, torch.zeros((), dtype=grad.dtype)), None, None


class _RoutedMaxPool(torch.autograd.Function):
    """max_pool2d, with a backward that sends each window's gradient to the element the step's Routing names at
    its tap (torch's own max_pool2d backward kernel, on the chosen indices)."""

    @staticmethod
    def forward(ctx, x, pool, routing, tap):
        args = (_pair(pool.kernel_size), _pair(pool.stride), _pair(pool.padding), _pair(pool.dilation), pool.ceil_mode)
        out, index = torch.ops.aten.max_pool2d_with_indices(x, *args)
        ctx.save_for_backward(x, index)
        ctx.args, ctx.routing, ctx.tap = args, routing, tap
        return out

    @staticmethod
    def backward(ctx, grad):
        x, index = ctx.saved_tensors
        entry = ctx.routing.entries.get(ctx.tap)
        if entry is not None:
            _, forced, mask = entry
            index = torch.where(mask, forced, index)
        return torch.ops.aten.max_pool2d_with_indices_backward(grad, x, *ctx.args, index), None, None, None


class _RoutedForward:
    """A module computing through its routed function while installed; remove() gives it back its own forward."""

    def __init__(self, module: nn.Module, forward):
        self.module = module
        module.forward = forward  # an instance attribute: nn.Module calls it instead of the class's forward

    def remove(self) -> None:
        del self.module.forward


def install_routing(module_taps: dict, routing: Routing) -> list:
    """Every ReLU and max-pool whose output is a tap computes through its routed function instead of its own
    (same forward values), so that `routing`, filled in after the forward, steers the backward. -> handles to
    remove. Replacing the forward, rather than recomputing after it in a hook, keeps one output per layer: an
    in-place ReLU's own result would stay alive in the graph beside the routed one (measured at SSD300 batch 4:
    a float64 forward's saved tensors about 1 GB larger).
    Mining and matching entries are applied by the loss (loss.py), not here."""
    handles = []
    for module, tap in module_taps.items():
        if isinstance(module, nn.ReLU):
            forward = lambda x, tap=tap: _RoutedReLU.apply(x, routing, tap)
        elif isinstance(module, nn.MaxPool2d):
            forward = lambda x, m=module, tap=tap: _RoutedMaxPool.apply(x, m, routing, tap)
        else:
            continue
        handles.append(_RoutedForward(module, forward))
    return handles


def replayed_relu_pass(taps: dict, replay: dict) -> dict:
    """Where the reference's backward let the gradient through each replayed ReLU, from its trace (tap -> array) and
    the replay it ran with: {replayed ReLU tap: (B,C,H,W) bool}. Elsewhere a ReLU passes the gradient where its output
    is positive, as torch's does."""
    return {tap: ((torch.from_numpy(taps[tap]) > 0) | force_pass) & ~force_block
            for tap, (kind, force_pass, force_block) in replay.items() if kind == "relu"}

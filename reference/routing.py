"""Decisions that rounding can flip: which element a max-pool window passes on, whether a ReLU passes its
input, and which of several equal losses a hard-negative selection takes. Each also decides where the gradient
flows.

Where a pooling window holds two elements equal up to float32 rounding, or a ReLU input is zero up to rounding,
the choice is decided by rounding noise: a correct port may decide the other way, and every gradient upstream
then differs from the reference's by far more than rounding. The harness finds such near-ties and replays the
reference with the port's decision at exactly those places (parity/routing_ties.py), so that gradients are
compared like for like and the ties are reported, not hidden. A decision that is not a near-tie is never replayed.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .taps import module_taps

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


def forced_pool_hook(forced: torch.Tensor, mask: torch.Tensor):
    """A forward hook for a MaxPool2d that takes element `forced` where `mask` is set and its own maximum elsewhere.
    The output is a gather, so autograd sends each window's gradient to the element it took."""

    def hook(module, inputs, _output):
        x = inputs[0]
        index = torch.where(mask, forced, window_argmax(module, x))
        batch, channels = x.shape[:2]
        taken = x.reshape(batch, channels, -1).gather(2, index.reshape(batch, channels, -1))
        return taken.view(index.shape)

    return hook


def forced_relu_hook(force_pass: torch.Tensor, force_block: torch.Tensor):
    """A forward hook for a ReLU that passes its (near-zero) input where `force_pass` is set and outputs 0 where
    `force_block` is set, so the gradient flows exactly where the other side's ReLU let it."""

    def hook(_module, inputs, output):
        x = inputs[0]
        return torch.where(force_pass, x, torch.where(force_block, torch.zeros_like(x), output))

    return hook


def install_replay(model, module_taps: dict, replay: dict) -> list:
    """replay: {tap: ("pool", forced, mask) | ("relu", force_pass, force_block)} -> hook handles to remove.
    ("mining", negatives, mask) and ("match", matched, mask) entries are applied by the loss (reference/loss.py),
    not here."""
    modules = {name: module for module, name in module_taps.items()}
    handles = []
    for tap, (kind, *masks) in replay.items():
        if kind in ("mining", "match"):
            continue
        hook = forced_pool_hook(*masks) if kind == "pool" else forced_relu_hook(*masks)
        handles.append(modules[tap].register_forward_hook(hook))
    return handles


def replayed_decisions(model, taps: dict, replay: dict) -> tuple:
    """The forward decisions the reference's backward used, from its trace (tap -> array) and the replay it ran
    with: -> ({pool tap: (B,C,OH,OW) window argmax}, {replayed ReLU tap: (B,C,H,W) bool, where the gradient passed}).
    Elsewhere a ReLU passes the gradient where its output is positive, as torch's does."""
    modules = {name: module for module, name in module_taps(model).items()}
    pool_argmax = {}
    for tap, input_tap in POOL_INPUTS.items():
        with torch.no_grad():
            own = window_argmax(modules[tap], torch.from_numpy(taps[input_tap]))
        entry = replay.get(tap)
        pool_argmax[tap] = torch.where(entry[2], entry[1], own) if entry else own
    relu_pass = {tap: ((torch.from_numpy(taps[tap]) > 0) | force_pass) & ~force_block
                 for tap, (kind, force_pass, force_block) in replay.items() if kind == "relu"}
    return pool_argmax, relu_pass

"""One training step of the reference without the update: forward taps, loss taps, and the gradient of
loss.total with respect to every tap (retain_grad) and every parameter, in one ordered trace."""

from collections import OrderedDict

import torch
from torchvision.models.detection.ssd import SSD

from .loss import LOSS_TAPS, run_loss
from .routing import install_replay
from .taps import FORWARD_TAPS, module_taps, run_forward


def tap_parameters(model: SSD) -> dict:
    """tap name -> state_dict keys of the layer that produces it (a conv tap is read after its ReLU, so the conv
    is the module just before that ReLU in its Sequential)."""
    names = {module: name for name, module in model.named_modules()}
    params = {"backbone.conv4_3_l2norm": ["backbone.scale_weight"]}
    for module, tap in module_taps(model).items():
        name = names[module]
        if isinstance(module, torch.nn.ReLU):
            parent, _, index = name.rpartition(".")
            name = f"{parent}.{int(index) - 1}"
        if isinstance(model.get_submodule(name), torch.nn.Conv2d):
            params[tap] = [f"{name}.weight", f"{name}.bias"]
    return params


def backward_order(model: SSD) -> list:
    """Gradient taps in backward order: reverse execution order, each layer's parameter gradients right after the
    gradient of its output."""
    params = tap_parameters(model)
    order = []
    for tap in reversed(FORWARD_TAPS):
        if tap == "priors":
            continue
        order.append(f"grad/{tap}")
        order += [f"param_grad/{key}" for key in params.get(tap, [])]
    return order


def step_order(model: SSD) -> list:
    return FORWARD_TAPS + LOSS_TAPS + backward_order(model)


def run_step(model: SSD, images: torch.Tensor, boxes: list, labels: list, routing: dict | None = None
             ) -> "OrderedDict[str, torch.Tensor]":
    """images (B,3,300,300) normalized, per-image boxes (n,4) xyxy pixels and labels (n,) -> every tap of the step.

    routing: optional decisions of another side replayed at near-ties (reference/routing.py)."""
    model.zero_grad(set_to_none=True)
    handles = install_replay(model, module_taps(model), routing or {})
    try:
        taps = run_forward(model, images)
    finally:
        for handle in handles:
            handle.remove()
    for tensor in taps.values():
        if tensor.requires_grad:
            tensor.retain_grad()
    mining = (routing or {}).get("mining.negatives")
    matching = (routing or {}).get("match.matched_idx")
    losses = run_loss(model, taps["loc_head"], taps["conf_head"], taps["priors"], boxes, labels,
                      mining[1:] if mining else None, matching[1:] if matching else None)
    losses["loss.total"].backward()

    trace = OrderedDict((name, t.detach()) for name, t in taps.items())
    trace.update((name, t.detach()) for name, t in losses.items())
    parameters = dict(model.named_parameters())
    for name in backward_order(model):
        kind, _, key = name.partition("/")
        source = taps[key] if kind == "grad" else parameters[key]
        trace[name] = source.grad if source.grad is not None else torch.zeros_like(source)
    return trace

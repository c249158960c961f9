"""One training step of the reference without the update: forward taps, loss taps, and the gradient of
loss.total with respect to every tap (retain_grad) and every parameter, in one ordered trace. The step can stop
between forward and backward (PendingStep), so that the backward can follow another side's near-tie decisions."""

from collections import OrderedDict

import numpy as np
import torch
from torchvision.models.detection.ssd import SSD

from .loss import LOSS_TAPS, run_loss
from .routing import Routing, install_routing
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


class PendingStep:
    """One training step of the reference whose forward has run and whose backward has not: near-ties against
    another side are found on its forward trace, then the backward runs once with that side's decisions there
    (routing.py). The graph is kept until the last backward."""

    def __init__(self, model: SSD, images: torch.Tensor, boxes: list, labels: list):
        """images (B,3,300,300) normalized, per-image boxes (n,4) xyxy pixels and labels (n,)."""
        self.model, self.boxes, self.labels = model, boxes, labels
        self.routing = Routing()
        handles = install_routing(module_taps(model), self.routing)
        try:
            self.taps = run_forward(model, images)
        finally:
            for handle in handles:
                handle.remove()
        for tensor in self.taps.values():
            if tensor.requires_grad:
                tensor.retain_grad()
        self.plain_losses = self._run_loss(None, None)

    def _run_loss(self, mining: tuple | None, matching: tuple | None) -> "OrderedDict[str, torch.Tensor]":
        return run_loss(self.model, self.taps["loc_head"], self.taps["conf_head"], self.taps["priors"], self.boxes,
                        self.labels, mining[1:] if mining else None, matching[1:] if matching else None)

    def _losses(self, routing: dict) -> "OrderedDict[str, torch.Tensor]":
        """The loss taps under routing's mining and matching decisions (recomputed from the head outputs)."""
        mining, matching = routing.get("mining.negatives"), routing.get("match.matched_idx")
        if mining is None and matching is None:
            return self.plain_losses
        return self._run_loss(mining, matching)

    def forward_trace(self, routing: dict | None = None) -> "OrderedDict[str, np.ndarray]":
        """Forward and loss taps as arrays (views, no copy); the loss taken with routing's mining and matching
        decisions, if it has any (the network's forward values do not depend on the routing)."""
        trace = OrderedDict((name, t.detach().numpy()) for name, t in self.taps.items())
        trace.update((name, t.detach().numpy()) for name, t in self._losses(routing or {}).items())
        return trace

    def backward(self, routing: dict | None = None, keep_graph: bool = False) -> "OrderedDict[str, torch.Tensor]":
        """The backward of loss.total with routing's decisions at its near-ties -> every tap of the step, forward,
        loss and gradients, in step_order. keep_graph: another backward (other routing) will follow."""
        routing = routing or {}
        self.routing.entries = {tap: entry for tap, entry in routing.items() if entry[0] in ("pool", "relu")}
        self.model.zero_grad(set_to_none=True)
        for tensor in self.taps.values():
            tensor.grad = None
        losses = self._losses(routing)
        losses["loss.total"].backward(retain_graph=keep_graph)

        trace = OrderedDict((name, t.detach()) for name, t in self.taps.items())
        trace.update((name, t.detach()) for name, t in losses.items())
        parameters = dict(self.model.named_parameters())
        for name in backward_order(self.model):
            kind, _, key = name.partition("/")
            source = self.taps[key] if kind == "grad" else parameters[key]
            trace[name] = source.grad if source.grad is not None else torch.zeros_like(source)
        return trace


def run_step(model: SSD, images: torch.Tensor, boxes: list, labels: list, routing: dict | None = None
             ) -> "OrderedDict[str, torch.Tensor]":
    """images (B,3,300,300) normalized, per-image boxes (n,4) xyxy pixels and labels (n,) -> every tap of the step.

    routing: optional decisions of another side taken at near-ties (routing.py)."""
    return PendingStep(model, images, boxes, labels).backward(routing)

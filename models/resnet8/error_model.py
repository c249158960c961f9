"""Per-element bounds of every tensor of a ResNet-8 training step, walked over its stage graph (spec.py) with the
core's stage bounds (parity/core/error_model): a tensor's bound is its own rounding plus the side's measured input
deviations carried through its stage, nothing carried in execution order."""

import numpy as np
import torch
import torch.nn.functional as F

from parity.core.error_model import backward, batchnorm, classifier, forward, loss, sgd
from parity.core.error_model.rounding import finished, gamma, u

from .spec import STAGES, consumers

BN_EPS, BN_MOMENTUM = 1e-5, 0.1


class ResNet8ErrorModel:
    """Bounds of one scenario's step. model: the reference (its modules' geometry); weights: the state_dict every
    side started the step from (float64 arrays); oracle: the float64 trace; images (B,3,32,32) and labels (B,) the
    scenario's; sgd: the update's settings."""

    def __init__(self, model, weights: dict, oracle: dict, images: np.ndarray, labels: np.ndarray, sgd):
        self.model = model
        self.images = torch.as_tensor(np.asarray(images), dtype=torch.float64)
        self.weights = {k: torch.as_tensor(np.asarray(v), dtype=torch.float64) for k, v in weights.items()
                        if not k.endswith("num_batches_tracked")}
        self.oracle = oracle
        self.labels = torch.as_tensor(np.asarray(labels), dtype=torch.int64)
        self.sgd = sgd
        self.readers = consumers()
        self.assumed_missing = False

    def value(self, name):
        return torch.as_tensor(np.asarray(self.oracle[name]), dtype=torch.float64)

    def deviation(self, name, side):
        given = side.get(name)
        if given is None or np.shape(given) != np.shape(self.oracle[name]):  # judged unknown: nothing below it is
            self.assumed_missing = True
            return torch.full(np.shape(self.oracle[name]), torch.inf, dtype=torch.float64)
        return torch.as_tensor(np.asarray(given), dtype=torch.float64).sub(self.value(name)).abs_()

    def bound(self, name: str, side: dict):
        """Per-element bound on |side[name] - oracle[name]|, or None where the tensor is judged exactly (the batch
        counters)."""
        self.assumed_missing = False
        with torch.no_grad():
            value = self._bound(name, side)
        if value is None:
            return None
        return finished(value.reshape(np.shape(self.oracle[name])).numpy().astype(np.float64, copy=True))

    def _bound(self, name, side):
        if name in STAGES:
            return self._forward(STAGES[name], side)
        if name == "loss":
            return self._loss(side)
        if name.startswith("grad/"):
            return self._tap_gradient(name.removeprefix("grad/"), side)
        if name.startswith("param_grad/"):
            return self._parameter_gradient(name.removeprefix("param_grad/"), side)
        if name.startswith(("param/", "momentum/")):
            return self._update(name, side)
        if name.startswith("buffer/") and not name.endswith("num_batches_tracked"):
            return self._running(name.removeprefix("buffer/"), side)
        return None

    def _module(self, stage):
        return self.model.get_submodule(stage.module)

    def _input(self, stage, side, index=0):
        tap = stage.inputs[index]
        if tap == "input":
            return self.images, None
        return self.value(tap), self.deviation(tap, side)

    # -- forward

    def _forward(self, stage, side):
        x, dx = self._input(stage, side)
        if dx is None:
            dx = torch.zeros_like(x)
        if stage.kind == "conv":
            w = self.weights[f"{stage.module}.weight"]
            return forward.conv(self._module(stage), x, dx, w, torch.zeros(w.shape[0], dtype=torch.float64))
        if stage.kind == "batchnorm":
            return batchnorm.forward(x, dx, self.weights[f"{stage.module}.weight"], self.weights[f"{stage.module}.bias"],
                                     self.value(stage.tap), BN_EPS)
        if stage.kind == "relu":
            return dx  # 1-Lipschitz and exact
        if stage.kind == "add":
            y, dy = self._input(stage, side, 1)
            return u() * (x + y).abs() + (1 + u()) * (dx + dy)
        if stage.kind == "avgpool":
            return classifier.avgpool(x, dx)
        return classifier.linear(x, dx, self.weights["fc.weight"], self.weights["fc.bias"])

    def _loss(self, side):
        z, dz = self.value("fc"), self.deviation("fc", side)
        per_image = loss.cross_entropy(z[None], dz[None], self.labels[None], self._per_image_loss(z)[None])[0]
        count = z.shape[0]
        return gamma(count + 1) * self._per_image_loss(z).abs().mean() + (1 + u()) * per_image.mean()

    def _per_image_loss(self, z):
        return F.cross_entropy(z, self.labels, reduction="none")

    # -- backward

    def _tap_gradient(self, tap, side):
        if tap == "fc":  # the loss's own backward: (softmax - onehot) / B
            z, dz = self.value("fc"), self.deviation("fc", side)
            weight = torch.full(self.labels.shape, 1.0 / z.shape[0], dtype=torch.float64)
            return loss.conf_gradient(z[None], dz[None], self.labels[None], weight[None])[0]
        readers, shape = self.readers[tap], self.value(tap).shape
        adds = gamma(len(readers)) if len(readers) > 1 else 0.0  # the consumers' parts summed
        total = torch.zeros(shape, dtype=torch.float64)
        for r in readers:
            grad, dgrad = self.value("grad/" + r.tap), self.deviation("grad/" + r.tap, side)
            if r.kind == "conv":
                w = self.weights[f"{r.module}.weight"]
                g = gamma(backward.conv_terms(w) + len(readers))
                total += backward.conv_input(self._module(r), shape, w, grad, dgrad, g)
                continue
            if r.kind == "batchnorm":
                x, dx = self._input(r, side)
                part, _, _ = batchnorm.backward(x, dx, self.weights[f"{r.module}.weight"], grad, dgrad, BN_EPS)
                magnitude = self._bn_input_gradient(r, grad).abs() + part
            elif r.kind == "relu":
                part, magnitude = self._relu_input(r, tap, side, grad, dgrad)
            elif r.kind == "add":
                part, magnitude = dgrad, grad.abs() + dgrad
            elif r.kind == "avgpool":
                part = classifier.avgpool_input(grad, dgrad, shape)
                magnitude = grad.abs()[:, :, None, None] / (shape[2] * shape[3]) + part
            else:  # the classifier's input
                w = self.weights["fc.weight"]
                part = classifier.linear_input(grad, dgrad, w, gamma(w.shape[0] + len(readers)))
                total += part
                continue
            total += part + adds * magnitude
        return total

    def _relu_input(self, relu, tap, side, grad, dgrad):
        """The gradient through a ReLU: passed where the side's output is positive; where its decision differs from
        the oracle's (an input within rounding of 0), the whole of the oracle's gradient is the difference."""
        oracle_on = self.value(relu.tap) > 0
        given = side.get(relu.tap)
        side_on = torch.from_numpy(np.asarray(given) > 0) if given is not None else oracle_on
        part = dgrad * side_on + grad.abs() * (side_on ^ oracle_on)
        return part, grad.abs() * (side_on | oracle_on) + part

    def _bn_input_gradient(self, stage, grad):
        x = self.value(stage.inputs[0])
        xhat = (x - x.mean(dim=(0, 2, 3), keepdim=True)) * (x.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
                                                             + BN_EPS).rsqrt()
        a, b = grad.mean(dim=(0, 2, 3), keepdim=True), (grad * xhat).mean(dim=(0, 2, 3), keepdim=True)
        scale = self.weights[f"{stage.module}.weight"].view(1, -1, 1, 1) * (
            x.var(dim=(0, 2, 3), unbiased=False, keepdim=True) + BN_EPS).rsqrt()
        return scale * (grad - a - xhat * b)

    def _parameter_gradient(self, key, side):
        module, part = key.rsplit(".", 1)
        stage = STAGES[module]
        grad, dgrad = self.value("grad/" + stage.tap), self.deviation("grad/" + stage.tap, side)
        x, dx = self._input(stage, side)
        if dx is None:
            dx = torch.zeros_like(x)
        if stage.kind == "conv":
            return backward.conv_weight(self._module(stage), x, dx, self.weights[key].shape, grad, dgrad)
        if stage.kind == "batchnorm":
            _, weight, bias = batchnorm.backward(x, dx, self.weights[f"{module}.weight"], grad, dgrad, BN_EPS)
            return weight if part == "weight" else bias
        weight, bias = classifier.linear_weight(x, dx, grad, dgrad)
        return weight if part == "weight" else bias

    # -- what the step leaves

    def _update(self, name, side):
        group, key = name.split("/", 1)
        p = self.weights[key].numpy()
        g = np.asarray(self.oracle["param_grad/" + key], dtype=np.float64)
        dg = self.deviation("param_grad/" + key, side).numpy()
        buffer, parameter = sgd.update(p, np.zeros_like(p), None, None, g, dg, self.sgd.lr, self.sgd.momentum,
                                       self.sgd.weight_decay)
        return torch.from_numpy(buffer if group == "momentum" else parameter)

    def _running(self, key, side):
        module, part = key.rsplit(".", 1)
        stage = STAGES[module]
        x, dx = self._input(stage, side)
        mean, var = batchnorm.running(x, dx, self.weights[f"{module}.running_mean"],
                                      self.weights[f"{module}.running_var"], BN_EPS, BN_MOMENTUM)
        return mean if part == "running_mean" else var

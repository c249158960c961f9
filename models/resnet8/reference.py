"""The PyTorch reference of ResNet-8, torchvision-style (torch.nn modules, torchvision's BasicBlock, state_dict
names), and one training step of it as an ordered trace.

    conv1 3->32 3x3, bn1, relu
    layer1: BasicBlock(32, 32)
    layer2: BasicBlock(32, 64, stride 2, downsample 1x1 conv + BN)
    layer3: BasicBlock(64, 128, stride 2, downsample 1x1 conv + BN)
    avgpool (global), fc 128->10, cross-entropy (mean over the batch)

The trace, in execution order: every forward tap, `loss`, then `grad/<tap>` in backward order with each layer's
`param_grad/<key>` after the gradient of its output, then what the SGD update leaves: `param/<key>`,
`momentum/<key>` and the BatchNorm running statistics `buffer/<key>` (running_mean, running_var,
num_batches_tracked)."""

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.resnet import BasicBlock

WIDTHS = (32, 64, 128)
NUM_CLASSES = 10
IMAGE_SIZE = 32


@dataclass(frozen=True)
class SgdSettings:
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4


class ResNet8(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(3, WIDTHS[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(WIDTHS[0])
        self.relu = nn.ReLU(inplace=False)
        self.layer1 = nn.Sequential(BasicBlock(WIDTHS[0], WIDTHS[0]))
        self.layer2 = nn.Sequential(_downsampling_block(WIDTHS[0], WIDTHS[1]))
        self.layer3 = nn.Sequential(_downsampling_block(WIDTHS[1], WIDTHS[2]))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(WIDTHS[2], num_classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _downsampling_block(inplanes: int, planes: int) -> BasicBlock:
    downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, 2, bias=False), nn.BatchNorm2d(planes))
    return BasicBlock(inplanes, planes, stride=2, downsample=downsample)


def build_reference(seed: int, dtype: torch.dtype = torch.float32) -> ResNet8:
    """Kaiming-initialised convolutions (torchvision's init); BatchNorm's affine parameters and running statistics
    drawn away from 1 and 0, so that a port which ignores one of them differs."""
    generator = torch.Generator().manual_seed(seed)
    model = ResNet8()
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, nn.Conv2d):
                fan_out = module.out_channels * module.kernel_size[0] * module.kernel_size[1]
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * (2.0 / fan_out) ** 0.5)
            elif isinstance(module, nn.BatchNorm2d):
                c = module.num_features
                module.weight.copy_(1 + 0.2 * torch.randn(c, generator=generator))
                module.bias.copy_(0.1 * torch.randn(c, generator=generator))
                module.running_mean.copy_(0.1 * torch.randn(c, generator=generator))
                module.running_var.copy_(1 + 0.5 * torch.rand(c, generator=generator))
            elif isinstance(module, nn.Linear):
                bound = 1 / module.in_features ** 0.5
                module.weight.copy_((torch.rand(module.weight.shape, generator=generator) * 2 - 1) * bound)
                module.bias.copy_((torch.rand(module.bias.shape, generator=generator) * 2 - 1) * bound)
    return model.to(dtype).train()


def state_dict_arrays(model: ResNet8) -> dict:
    """state_dict key -> a numpy copy (what the native model is built from; a copy, so that it still holds the
    weights a step started from after the step has updated the model's)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def forward_taps(model: ResNet8, images: torch.Tensor) -> "OrderedDict[str, torch.Tensor]":
    """Every forward tap in execution order, computed by the model's own modules (BasicBlock.forward spelled out,
    since its one ReLU module runs twice), but for the ReLUs: torchvision's BasicBlock applies them in place, which
    would overwrite the BatchNorm and add taps, so they run out of place here (the same values)."""
    taps = OrderedDict()

    def tap(name, value):
        taps[name] = value
        return value

    x = tap("relu", F.relu(tap("bn1", model.bn1(tap("conv1", model.conv1(images))))))
    for layer_name in ("layer1", "layer2", "layer3"):
        block = getattr(model, layer_name)[0]
        prefix = f"{layer_name}.0"
        out = tap(f"{prefix}.relu1", F.relu(tap(f"{prefix}.bn1", block.bn1(tap(f"{prefix}.conv1", block.conv1(x))))))
        out = tap(f"{prefix}.bn2", block.bn2(tap(f"{prefix}.conv2", block.conv2(out))))
        identity = x
        if block.downsample is not None:
            identity = tap(f"{prefix}.downsample.1",
                           block.downsample[1](tap(f"{prefix}.downsample.0", block.downsample[0](x))))
        x = tap(f"{prefix}.out", F.relu(tap(f"{prefix}.add", out + identity)))
    pooled = tap("avgpool", torch.flatten(model.avgpool(x), 1))
    tap("fc", model.fc(pooled))
    return taps


def _as_array(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def training_step(model: ResNet8, images: torch.Tensor, labels: torch.Tensor, sgd: SgdSettings,
                  optimizer: torch.optim.SGD | None = None) -> "OrderedDict[str, np.ndarray]":
    """One training step (forward in training mode, cross-entropy, backward, SGD with momentum and weight decay) ->
    the whole trace. optimizer: the one of earlier steps (a trajectory); a new one by default."""
    model.train()
    optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=sgd.lr, momentum=sgd.momentum,
                                             weight_decay=sgd.weight_decay)
    optimizer.zero_grad(set_to_none=True)
    taps = forward_taps(model, images)
    for value in taps.values():
        value.retain_grad()
    loss = F.cross_entropy(taps["fc"], labels)
    loss.backward()
    trace = OrderedDict((name, _as_array(value)) for name, value in taps.items())
    trace["loss"] = _as_array(loss)
    parameters = dict(model.named_parameters())
    for name in backward_order(list(taps)):
        if name.startswith("grad/"):
            trace[name] = _as_array(taps[name.removeprefix("grad/")].grad)
        else:
            trace[name] = _as_array(parameters[name.removeprefix("param_grad/")].grad)
    optimizer.step()
    for key, value in model.state_dict().items():
        group = "param" if key in parameters else "buffer"
        trace[f"{group}/{key}"] = _as_array(value).copy()
    for key, parameter in parameters.items():
        trace[f"momentum/{key}"] = _as_array(optimizer.state[parameter]["momentum_buffer"]).copy()
    return trace


def tap_parameters(tap: str) -> list:
    """state_dict keys of the parameters of the layer producing `tap` (convolutions have no bias)."""
    if tap.endswith(("conv1", "conv2", "downsample.0")):
        return [f"{tap}.weight"]
    if tap.endswith(("bn1", "bn2", "downsample.1")) or tap == "fc":
        return [f"{tap}.weight", f"{tap}.bias"]
    return []


def backward_order(forward: list) -> list:
    """Gradient names in backward order: reverse execution order, each layer's parameter gradients right after
    the gradient of its output."""
    order = []
    for tap in reversed(forward):
        order.append(f"grad/{tap}")
        order += [f"param_grad/{key}" for key in tap_parameters(tap)]
    return order

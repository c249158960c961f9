"""The reference SSD300, built from torchvision's own components, with weights drawn from a seed.

The model is torchvision's `ssd300_vgg16` (no downloaded weights). The narrow config replaces every conv by one
with 1/8 of the channels, keeping kernel, stride, padding and dilation, and re-initialises it with the rule
torchvision applies at that position (Kaiming for the VGG convs, Xavier for fc6/fc7, extras and heads).

After torchvision's initialisation, biases and the L2Norm scale are randomised: torchvision starts them at 0 and
20 everywhere, which would hide a port that adds the wrong channel's bias or scale.
"""

import torch
from torch import nn
from torchvision.models.detection import ssd300_vgg16
from torchvision.models.detection.ssd import SSD

from .configs import ModelConfig


def _uses_kaiming_init(name: str) -> bool:
    # torchvision's VGG convs (features and conv5_x in extra.0) keep VGG's Kaiming init; fc6/fc7 at
    # backbone.extra.0.7, the extras and the heads are Xavier-initialised by the SSD code.
    return name.startswith("backbone.features.") or (
        name.startswith("backbone.extra.0.") and not name.startswith("backbone.extra.0.7.")
    )


def _init_conv(conv: nn.Conv2d, name: str) -> None:
    if _uses_kaiming_init(name):
        nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    else:
        nn.init.xavier_uniform_(conv.weight)


def _narrow_channels(channels: int, divisor: int) -> int:
    return channels if channels == 3 else channels // divisor


def _shrink(model: SSD, config: ModelConfig) -> None:
    """Replace each conv by a narrower one; head output channels (anchors x classes/coords) stay."""
    head_names = {name for name, _ in model.head.named_modules(prefix="head")}
    for name, conv in list(model.named_modules()):
        if not isinstance(conv, nn.Conv2d):
            continue
        is_head = name in head_names
        narrow = nn.Conv2d(
            _narrow_channels(conv.in_channels, config.width_divisor),
            conv.out_channels if is_head else _narrow_channels(conv.out_channels, config.width_divisor),
            kernel_size=conv.kernel_size,
            stride=conv.stride,
            padding=conv.padding,
            dilation=conv.dilation,
        )
        _init_conv(narrow, name)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, narrow)
    channels = model.backbone.scale_weight.numel() // config.width_divisor
    model.backbone.scale_weight = nn.Parameter(torch.full((channels,), 20.0))


def _randomise_biases_and_scale(model: SSD) -> None:
    for name, param in model.named_parameters():
        if name.endswith(".bias"):
            nn.init.normal_(param, mean=0.0, std=0.05)
    with torch.no_grad():
        model.backbone.scale_weight.mul_(torch.empty_like(model.backbone.scale_weight).uniform_(0.5, 1.5))


def build_reference(config: ModelConfig, seed: int, dtype: torch.dtype = torch.float32) -> SSD:
    """Deterministic for (config, seed), whatever the caller's RNG state; the caller's state is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ssd300_vgg16(weights=None, weights_backbone=None, num_classes=config.num_classes)
        if config.width_divisor != 1:
            _shrink(model, config)
        _randomise_biases_and_scale(model)
    # The harness taps post-ReLU activations as separate tensors; an in-place ReLU would overwrite the conv output
    # that autograd and the hooks hold. Values are identical either way.
    for module in model.modules():
        if isinstance(module, nn.ReLU):
            module.inplace = False
    return model.to(dtype).eval()


def state_dict_arrays(model: SSD) -> dict:
    """The reference's weights as contiguous numpy arrays, the only way weights reach the native side."""
    return {name: tensor.detach().contiguous().numpy() for name, tensor in model.state_dict().items()}

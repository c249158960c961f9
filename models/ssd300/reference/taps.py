"""Forward taps of the reference: every named tensor of the architecture, collected with hooks.

Tap names are canonical and shared with the native side. A conv's tap is its post-ReLU activation (the tensor
the next layer reads); head convs have no ReLU and are tapped raw.
"""

from collections import OrderedDict

import torch
from torch import nn
from torchvision.models.detection.image_list import ImageList
from torchvision.models.detection.ssd import SSD

from .configs import IMAGE_SIZE

VGG_CONVS = [f"conv{b}_{i}" for b, n in ((1, 2), (2, 2), (3, 3), (4, 3), (5, 3)) for i in range(1, n + 1)]
EXTRA_CONVS = [f"conv{b}_{i}" for b in (8, 9, 10, 11) for i in (1, 2)]
NUM_SOURCES = 6

def _forward_tap_order() -> list:
    """Execution order: the order in which a forward pass produces each tensor (torchvision runs the regression
    head over all sources before the classification head)."""
    b = "backbone."
    order = [b + "conv1_1", b + "conv1_2", b + "pool1", b + "conv2_1", b + "conv2_2", b + "pool2"]
    order += [b + "conv3_1", b + "conv3_2", b + "conv3_3", b + "pool3"]
    order += [b + "conv4_1", b + "conv4_2", b + "conv4_3", b + "conv4_3_l2norm", b + "pool4"]
    order += [b + "conv5_1", b + "conv5_2", b + "conv5_3", b + "pool5", b + "conv6", b + "conv7"]
    order += [f"extras.{c}" for c in EXTRA_CONVS]
    order += [f"head.loc.{k}" for k in range(NUM_SOURCES)] + ["loc_head"]
    order += [f"head.conf.{k}" for k in range(NUM_SOURCES)] + ["conf_head"]
    return order + ["priors"]


FORWARD_TAPS = _forward_tap_order()


def module_taps(model: SSD) -> dict:
    """module -> tap name, for every module whose output is a tap."""
    taps = {}
    vgg = list(model.backbone.features) + list(model.backbone.extra[0])
    fc = vgg.pop()  # pool5, conv6, ReLU, conv7, ReLU
    conv_names, pool_index = iter(VGG_CONVS), 1
    for i, module in enumerate(vgg):
        if isinstance(module, nn.Conv2d):
            relu = vgg[i + 1]
            assert isinstance(relu, nn.ReLU), f"conv at VGG position {i} is not followed by a ReLU"
            taps[relu] = "backbone." + next(conv_names)
        elif isinstance(module, nn.MaxPool2d):
            taps[module] = f"backbone.pool{pool_index}"
            pool_index += 1
    taps[fc[0]] = "backbone.pool5"
    taps[fc[2]] = "backbone.conv6"
    taps[fc[4]] = "backbone.conv7"
    extra_names = iter(EXTRA_CONVS)
    for block in model.backbone.extra[1:]:
        taps[block[1]] = "extras." + next(extra_names)
        taps[block[3]] = "extras." + next(extra_names)
    for k in range(NUM_SOURCES):
        taps[model.head.regression_head.module_list[k]] = f"head.loc.{k}"
        taps[model.head.classification_head.module_list[k]] = f"head.conf.{k}"
    taps[model.head.regression_head] = "loc_head"
    taps[model.head.classification_head] = "conf_head"
    return taps


def _l2norm_hook(store):
    # The L2Norm of conv4_3 is computed inside SSDFeatureExtractorVGG.forward; it is source 0 of its output.
    def hook(_module, _inputs, output):
        store["backbone.conv4_3_l2norm"] = output["0"]

    return hook


def run_forward(model: SSD, images: torch.Tensor) -> "OrderedDict[str, torch.Tensor]":
    """images (B,3,300,300), already normalized -> every forward tap, in FORWARD_TAPS order.

    Runs backbone, head and anchor generator directly (no GeneralizedRCNNTransform: the input is the
    normalized batch). Tensors stay attached to the graph, so a caller may retain_grad() them.
    """
    if images.shape[-2:] != (IMAGE_SIZE, IMAGE_SIZE):
        raise ValueError(f"images must be {IMAGE_SIZE}x{IMAGE_SIZE}, got shape {tuple(images.shape)}")
    store = {}
    handles = [model.backbone.register_forward_hook(_l2norm_hook(store))]
    for module, name in module_taps(model).items():
        handles.append(module.register_forward_hook(lambda _m, _i, out, name=name: store.__setitem__(name, out)))
    try:
        features = list(model.backbone(images).values())
        model.head(features)
        image_list = ImageList(images, [(IMAGE_SIZE, IMAGE_SIZE)] * images.shape[0])
        store["priors"] = model.anchor_generator(image_list, features)[0]
    finally:
        for handle in handles:
            handle.remove()
    missing = [name for name in FORWARD_TAPS if name not in store]
    if missing:
        raise RuntimeError(f"reference taps were not recorded: {missing}")
    return OrderedDict((name, store[name]) for name in FORWARD_TAPS)


SOURCES = ["backbone.conv4_3_l2norm", "backbone.conv7", "extras.conv8_2", "extras.conv9_2", "extras.conv10_2",
           "extras.conv11_2"]


def stage_inputs(tap: str) -> list:
    """The taps a forward stage reads ("input" is the image batch), for replaying one stage in isolation."""
    chain = [t for t in FORWARD_TAPS[: FORWARD_TAPS.index("extras.conv11_2") + 1] if t != "backbone.conv4_3_l2norm"]
    if tap == "backbone.conv4_3_l2norm":
        return ["backbone.conv4_3"]
    if tap in chain:
        index = chain.index(tap)
        return ["input"] if index == 0 else [chain[index - 1]]
    if tap.startswith(("head.loc.", "head.conf.")):
        return [SOURCES[int(tap.rsplit(".", 1)[1])]]
    if tap in ("loc_head", "conf_head"):
        family = tap.split("_")[0]
        return [f"head.{family}.{k}" for k in range(NUM_SOURCES)]
    if tap == "priors":
        return []
    raise ValueError(f"no isolated stage for {tap!r}")

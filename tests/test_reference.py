"""The reference model is torchvision's SSD300: same state_dict keys and shapes; the narrow config keeps every
key with 1/8 of the channels; weights are a pure function of the seed."""

import torch
from torchvision.models.detection import ssd300_vgg16

from models.ssd300.reference.configs import get_config
from models.ssd300.reference.model import build_reference


def _shapes(model) -> dict:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def test_full_config_has_torchvision_ssd300_state_dict():
    expected = _shapes(ssd300_vgg16(weights=None, weights_backbone=None, num_classes=21))
    assert _shapes(build_reference(get_config("ssd300"), 0)) == expected
    assert len(expected) == 71


def test_narrow_config_keeps_keys_with_an_eighth_of_the_channels():
    full = _shapes(build_reference(get_config("ssd300"), 0))
    narrow = _shapes(build_reference(get_config("narrow"), 0))
    assert narrow.keys() == full.keys()
    assert narrow["backbone.features.0.weight"] == (8, 3, 3, 3)
    assert narrow["backbone.extra.0.7.1.weight"] == (128, 64, 3, 3)
    assert narrow["head.classification_head.module_list.1.weight"] == (126, 128, 3, 3)  # 6 anchors x 21 classes
    assert narrow["backbone.scale_weight"] == (64,)


def test_weights_depend_on_seed_only():
    torch.manual_seed(123)
    a = build_reference(get_config("narrow"), 5).state_dict()
    torch.manual_seed(999)
    b = build_reference(get_config("narrow"), 5).state_dict()
    c = build_reference(get_config("narrow"), 6).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["backbone.features.0.weight"], c["backbone.features.0.weight"])
    assert a["backbone.features.0.bias"].abs().sum() > 0, "biases are randomised so a wrong-channel bias is visible"

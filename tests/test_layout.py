"""Index decoding checked against torchvision's own flattening, not against a re-derivation of it."""

import torch
from torchvision.models.detection.ssd import SSDScoringHead

from models.ssd300.layout import SOURCE_OFFSETS, decode_index, decode_prior
from models.ssd300.reference.configs import ANCHORS_PER_LOCATION, NUM_PRIORS, SOURCE_SIZES


def _labelled_head_output(depth: int):
    """Run torchvision's SSDScoringHead on conv outputs whose values encode (source, anchor, component, y, x)."""
    convs = []
    for k, (size, anchors) in enumerate(zip(SOURCE_SIZES, ANCHORS_PER_LOCATION)):
        a, d, y, x = torch.meshgrid(
            torch.arange(anchors), torch.arange(depth), torch.arange(size), torch.arange(size), indexing="ij"
        )
        code = (((k * 10 + a) * 100 + d) * 100 + y) * 100 + x
        convs.append(code.reshape(1, anchors * depth, size, size).double())
    head = SSDScoringHead(torch.nn.ModuleList([torch.nn.Identity()] * 6), depth)
    return head(convs)[0]  # (P, depth)


def test_prior_offsets_and_count():
    assert SOURCE_OFFSETS == (0, 5776, 7942, 8542, 8692, 8728) and NUM_PRIORS == 8732


def test_decode_matches_torchvision_flattening():
    depth = 21
    flat = _labelled_head_output(depth)
    for prior in (0, 1, 5775, 5776, 7995, 7996, 8541, 8691, 8727, 8731, 3333, 6000):
        for component in (0, 7, 20):
            code = int(flat[prior, component])
            m = decode_index("conf_head", (1, NUM_PRIORS, depth), (0, prior, component))
            expected = (((m["source"] * 10 + m["anchor"]) * 100 + m["class"]) * 100 + m["y"]) * 100 + m["x"]
            assert code == expected, (prior, component, m)


def test_decode_head_conv_and_feature_map():
    assert decode_index("head.loc.2", (2, 24, 10, 10), (1, 9, 3, 4)) == {
        "image": 1, "source": 2, "anchor": 2, "component": "t_cy", "y": 3, "x": 4}
    assert decode_index("backbone.conv4_3", (2, 512, 38, 38), (1, 7, 2, 3)) == {"image": 1, "channel": 7, "y": 2, "x": 3}
    assert decode_prior(8731) == {"prior": 8731, "source": 5, "y": 0, "x": 0, "anchor": 3}

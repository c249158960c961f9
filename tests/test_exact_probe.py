"""The exact probe (parity/core/error_model/probe.py): PyTorch's float32 convolution meets it bit for bit on every
geometry the SSD300 has; a bias off by a relative 1e-6, behind a ReLU and in front of it, fails; no output of a
probe reads two impulses; a reference that differs is a harness error."""

import numpy as np
import pytest
import torch

from parity.core.compare import TensorResult, judge_exact_probe
from parity.core.error_model.probe import _impulses, conv_probe, judge_probe

# (in, out, kernel, stride, padding, dilation, size, relu): the SSD300's kinds of convolution
GEOMETRIES = [(16, 32, 3, 1, 1, 1, 38, True), (32, 64, 3, 1, 6, 6, 19, True), (32, 64, 3, 2, 1, 1, 10, True),
              (16, 32, 3, 1, 0, 1, 3, True), (64, 64, 1, 1, 0, 1, 19, True), (32, 24, 3, 1, 1, 1, 5, False)]


def _conv(geometry, seed=0):
    in_channels, out_channels, kernel, stride, padding, dilation, size, relu = geometry
    torch.manual_seed(seed)
    conv = torch.nn.Conv2d(in_channels, out_channels, kernel, stride, padding, dilation)
    return conv, (2, in_channels, size, size), relu


def _probe(conv, shape, relu):
    return conv_probe(conv, conv.weight.detach().double(), conv.bias.detach().double(), shape, relu)


def _run(conv, probe, relu):
    with torch.no_grad():
        out = conv(torch.from_numpy(probe["input"]))
    return (torch.relu(out) if relu else out).numpy()


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[:7])))
def test_pytorch_meets_the_probe_bit_for_bit(geometry):
    conv, shape, relu = _conv(geometry)
    probe = _probe(conv, shape, relu)
    judged = judge_probe(_run(conv, probe, relu), probe["expected"], probe["magnitude"])
    assert judged["differ"] == 0 and judged["units"] == 0, judged
    if relu:  # the impulses lift (nearly) every negative bias above the ReLU
        assert len(probe["unseen"]) <= conv.out_channels // 16, probe["unseen"]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[:7])))
def test_no_output_reads_two_impulses(geometry):
    conv, shape, relu = _conv(geometry)
    probe = _probe(conv, shape, relu)
    impulses = torch.from_numpy((probe["input"] != 0).astype(np.float64))
    taps = torch.ones_like(conv.weight, dtype=torch.float64)
    reads = torch.nn.functional.conv2d(impulses, taps, None, conv.stride, conv.padding, conv.dilation)
    assert reads.max() <= 1
    assert probe["input"].shape[0] > 1 if relu else probe["input"].shape[0] == 1  # impulses only behind a ReLU


@pytest.mark.parametrize("sign", [-1, 1])
def test_a_bias_off_by_a_relative_1e6_fails(sign):
    conv, shape, relu = _conv(GEOMETRIES[0], seed=3)
    probe = _probe(conv, shape, relu)
    channel = int(np.flatnonzero(np.sign(conv.bias.detach().numpy()) == sign)[0])
    with torch.no_grad():
        conv.bias[channel] *= 1 + 1e-6
    judged = judge_probe(_run(conv, probe, relu), probe["expected"], probe["magnitude"])
    assert judged["differ"] > 0 and judged["channels"] == [channel], judged
    assert judged["units"] > 1  # more than one rounding of its terms: no reordering explains it


def test_a_weight_rounded_to_bfloat16_fails_where_an_impulse_meets_it():
    conv, shape, relu = _conv(GEOMETRIES[4], seed=5)
    probe = _probe(conv, shape, relu)
    used = {int(c) for c in np.flatnonzero(probe["input"].any(axis=(0, 2, 3)))}
    with torch.no_grad():
        conv.weight[:, sorted(used)] = conv.weight[:, sorted(used)].bfloat16().float()
    assert judge_probe(_run(conv, probe, relu), probe["expected"], probe["magnitude"])["differ"] > 0


def test_a_reference_that_differs_is_a_harness_error_not_a_port_failure():
    conv, shape, relu = _conv(GEOMETRIES[0])
    probe = _probe(conv, shape, relu)
    correct = _run(conv, probe, relu)
    shifted = correct.copy()
    shifted[0, 0] = np.nextafter(shifted[0, 0], np.float32(np.inf))
    result = TensorResult("conv", "activation", "case", 2, list(correct.shape), "float32", "pass")
    judge_exact_probe(result, correct, shifted, probe["expected"], probe["magnitude"], probe["unseen"])
    assert result.harness_error and result.verdict == "fail" and "harness error" in result.reasons[0]
    result = TensorResult("conv", "activation", "case", 2, list(correct.shape), "float32", "pass")
    judge_exact_probe(result, shifted, correct, probe["expected"], probe["magnitude"], probe["unseen"])
    assert not result.harness_error and result.verdict == "fail" and "exact probe" in result.reasons[0]


def test_a_channel_whose_weights_cannot_lift_its_bias_is_reported_unseen():
    conv, shape, relu = _conv(GEOMETRIES[0])
    with torch.no_grad():
        conv.weight[5] = 0
        conv.bias[5] = -0.5
    probe = _probe(conv, shape, relu)
    assert 5 in probe["unseen"]
    assert judge_probe(_run(conv, probe, relu), probe["expected"], probe["magnitude"])["differ"] == 0


def test_a_bias_no_float32_impulse_can_lift_is_left_unseen_not_overflowed():
    conv, shape, relu = _conv(GEOMETRIES[0])
    with torch.no_grad():
        conv.weight[7] = 1e-30
        conv.bias[7] = -1e20
    probe = _probe(conv, shape, relu)
    assert 7 in probe["unseen"] and np.isfinite(probe["input"]).all()
    assert judge_probe(_run(conv, probe, relu), probe["expected"], probe["magnitude"])["differ"] == 0


def test_a_tap_that_only_meets_padding_leaves_the_rest_placed():
    conv, shape, relu = _conv((8, 64, 3, 1, 1, 1, 1, True))  # a 3x3 conv on a 1x1 map: only the centre tap reads
    probe = _probe(conv, shape, relu)
    needs = _impulses(conv.weight.detach().double().numpy(), conv.bias.detach().double().numpy(), relu)
    centre = [need for need in needs if need[1:3] == (1, 1)]
    assert 0 < len(centre) < len(needs)
    assert np.count_nonzero(probe["input"]) == len(centre)
    assert judge_probe(_run(conv, probe, relu), probe["expected"], probe["magnitude"])["differ"] == 0

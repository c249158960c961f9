"""The native ResNet-8 refuses bad input with an error that names the problem and the value received."""

import numpy as np
import pytest

import resnet8_native
from models.resnet8.reference import build_reference, state_dict_arrays


@pytest.fixture(scope="module")
def weights():
    return state_dict_arrays(build_reference(0))


def _step(model, images, labels):
    return model.train_step(images, labels, 0.01, 0.9, 5e-4)


def test_a_good_step_runs(weights):
    trace = _step(resnet8_native.ModelFloat32(weights), np.zeros((2, 3, 32, 32), np.float32), np.array([0, 9]))
    assert trace["fc"].shape == (2, 10)


@pytest.mark.parametrize("images, labels, message", [
    (np.zeros((2, 3, 28, 28), np.float32), np.array([0, 1]), "is 28x28, expected 32x32"),
    (np.zeros((2, 1, 32, 32), np.float32), np.array([0, 1]), "1 channels, expected 3"),
    (np.zeros((2, 3, 32, 32), np.float64), np.array([0, 1]), "dtype float64, expected float32"),
    (np.zeros((2, 3, 32, 32), np.float32), np.array([0, 10]), "labels[1] is 10, expected a class in [0, 10)"),
    (np.zeros((2, 3, 32, 32), np.float32), np.array([0]), "has shape (1,), expected (2,)"),
    (np.zeros((2, 3, 32, 32), np.float32), np.array([0, 1], np.int32), "dtype int32, expected int64"),
    (np.zeros((2, 3, 32, 64), np.float32)[..., ::2], np.array([0, 1]), "not C-contiguous"),
])
def test_bad_batch_is_refused(weights, images, labels, message):
    with pytest.raises((ValueError, TypeError), match=__import__("re").escape(message)):
        _step(resnet8_native.ModelFloat32(weights), images, labels)


def test_bad_state_dict_is_refused(weights):
    missing = {k: v for k, v in weights.items() if k != "layer2.0.bn1.running_var"}
    with pytest.raises(ValueError, match=r"lacks 'layer2\.0\.bn1\.running_var'"):
        resnet8_native.ModelFloat32(missing)
    wrong = dict(weights, **{"fc.weight": np.zeros((10, 64), np.float32)})
    with pytest.raises(ValueError, match=r"state_dict\['fc.weight'\] has shape \(10, 64\), expected \(10, 128\)"):
        resnet8_native.ModelFloat32(wrong)
    extra = dict(weights, **{"fc2.weight": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match="unexpected state_dict key 'fc2.weight'"):
        resnet8_native.ModelFloat32(extra)


def test_unknown_fault_is_refused():
    with pytest.raises(ValueError, match="unknown fault 'nope'; known faults: biased_running_var"):
        resnet8_native.set_faults(["nope"])

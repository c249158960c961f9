"""Bad input at the native boundary gets a clear Python exception naming the argument and the value received."""

import numpy as np
import pytest
import ssd_native
import torch

from models.ssd300.reference.routing import POOL_INPUTS, window_argmax
from models.ssd300.reference.taps import module_taps
from models.ssd300.sides import reference_model


@pytest.mark.parametrize(
    "images,error,message",
    [
        (np.zeros((3, 300, 300), np.float32), ValueError, r"'images' must have 4 dimensions .* got shape \(3, 300, 300\)"),
        (np.zeros((0, 3, 300, 300), np.float32), ValueError, r"'images' has batch size 0"),
        (np.zeros((1, 4, 300, 300), np.float32), ValueError, r"'images' has 4 channels, expected 3"),
        (np.zeros((1, 3, 299, 300), np.float32), ValueError, r"'images' is 299x300, expected 300x300"),
        (np.zeros((1, 3, 512, 512), np.float32), ValueError, r"'images' is 512x512"),
        (np.zeros((1, 3, 300, 300), np.float64), TypeError, r"'images' has dtype float64, expected float32"),
        (np.zeros((1, 3, 300, 300), np.int32), TypeError, r"'images' has dtype int32, expected float32"),
        (np.zeros((1, 300, 300, 3), np.float32).transpose(0, 3, 1, 2), ValueError, r"'images' .* is not C-contiguous"),
        (np.zeros((2, 3, 300, 600), np.float32)[:, :, :, ::2], ValueError, r"'images' .* is not C-contiguous"),
        ([[0.0]], TypeError, r"'images' must be a numpy.ndarray, got list"),
        (None, TypeError, r"'images' must be a numpy.ndarray, got NoneType"),
    ],
    ids=["rank3", "batch0", "4-channels", "299x300", "512x512", "float64", "int32", "transposed", "strided", "list", "none"],
)
def test_forward_rejects_bad_images(narrow_native, images, error, message):
    with pytest.raises(error, match=message):
        narrow_native.forward(images)


def test_model_still_works_after_rejected_calls(narrow_native, image):
    for bad in (np.zeros((1, 3, 10, 10), np.float32), np.zeros(5, np.float64)):
        with pytest.raises((ValueError, TypeError)):
            narrow_native.forward(bad)
    assert narrow_native.forward(image)["conf_head"].shape == (1, 8732, 21)


def test_float64_model_rejects_float32_images(narrow_weights):
    model = ssd_native.ModelFloat64({k: v.astype(np.float64) for k, v in narrow_weights.items()})
    with pytest.raises(TypeError, match="'images' has dtype float32, expected float64"):
        model.forward(np.zeros((1, 3, 300, 300), np.float32))


def test_missing_weight_is_named(narrow_weights):
    weights = dict(narrow_weights)
    del weights["head.regression_head.module_list.3.bias"]
    with pytest.raises(ValueError, match=r"missing weight 'head.regression_head.module_list.3.bias'"):
        ssd_native.ModelFloat32(weights)


def test_unexpected_weight_is_named(narrow_weights):
    weights = {**narrow_weights, "backbone.extra.9.weight": np.zeros((1,), np.float32)}
    with pytest.raises(ValueError, match=r"unexpected weight 'backbone.extra.9.weight'"):
        ssd_native.ModelFloat32(weights)


def test_misshaped_weight_is_named_with_its_shape(narrow_weights):
    weights = dict(narrow_weights)
    weights["backbone.features.2.weight"] = np.zeros((8, 9, 3, 3), np.float32)
    with pytest.raises(ValueError, match=r"'backbone.features.2.weight' has shape \(8, 9, 3, 3\), expected \(out_channels, 8, 3, 3\)"):
        ssd_native.ModelFloat32(weights)


def test_misshaped_bias_and_scale_are_named(narrow_weights):
    weights = {**narrow_weights, "backbone.features.0.bias": np.zeros((7,), np.float32)}
    with pytest.raises(ValueError, match=r"'backbone.features.0.bias' has shape \(7,\), expected \(8,\)"):
        ssd_native.ModelFloat32(weights)
    weights = {**narrow_weights, "backbone.scale_weight": np.zeros((65,), np.float32)}
    with pytest.raises(ValueError, match=r"'backbone.scale_weight' has shape \(65,\), expected \(64,\)"):
        ssd_native.ModelFloat32(weights)


def test_inconsistent_class_count_is_named(narrow_weights):
    weights = dict(narrow_weights)
    weights["head.classification_head.module_list.2.weight"] = np.zeros((6 * 20, 64, 3, 3), np.float32)
    weights["head.classification_head.module_list.2.bias"] = np.zeros((6 * 20,), np.float32)
    with pytest.raises(ValueError, match=r"module_list.2.weight' has 120 output channels, expected anchors \(6\) x num_classes \(21\)"):
        ssd_native.ModelFloat32(weights)


def test_weight_with_wrong_dtype_or_layout_is_named(narrow_weights):
    weights = {**narrow_weights, "backbone.features.0.weight": narrow_weights["backbone.features.0.weight"].astype(np.float64)}
    with pytest.raises(TypeError, match=r"'state_dict\['backbone.features.0.weight'\]' has dtype float64"):
        ssd_native.ModelFloat32(weights)
    transposed = np.ascontiguousarray(narrow_weights["backbone.features.0.weight"].transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
    weights = {**narrow_weights, "backbone.features.0.weight": transposed}
    with pytest.raises(ValueError, match=r"'state_dict\['backbone.features.0.weight'\]' .* is not C-contiguous"):
        ssd_native.ModelFloat32(weights)


def test_state_dict_must_map_str_to_arrays(narrow_weights):
    with pytest.raises(TypeError, match="state_dict keys must be str, got 3"):
        ssd_native.ModelFloat32({**narrow_weights, 3: np.zeros(1, np.float32)})
    with pytest.raises(TypeError, match=r"'state_dict\['backbone.scale_weight'\]' must be a numpy.ndarray, got list"):
        ssd_native.ModelFloat32({**narrow_weights, "backbone.scale_weight": [1.0] * 64})


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"stride": 0}, r"stride >= 1, pad >= 0, dilation >= 1; got stride=0"),
        ({"pad": -1}, r"got stride=1 pad=-1"),
        ({"dilation": 0}, r"dilation=0"),
    ],
)
def test_conv2d_rejects_bad_geometry(kwargs, message):
    x, w, b = np.zeros((1, 2, 5, 5), np.float32), np.zeros((3, 2, 3, 3), np.float32), np.zeros(3, np.float32)
    with pytest.raises(ValueError, match=message):
        ssd_native.conv2d_float32(x, w, b, **kwargs)


def test_conv2d_rejects_mismatched_channels_and_empty_output():
    with pytest.raises(ValueError, match=r"channel mismatch: inp \(1, 2, 5, 5\), weight \(3, 4, 3, 3\)"):
        ssd_native.conv2d_float32(np.zeros((1, 2, 5, 5), np.float32), np.zeros((3, 4, 3, 3), np.float32), np.zeros(3, np.float32))
    with pytest.raises(ValueError, match=r"output would be empty"):
        ssd_native.conv2d_float32(np.zeros((1, 2, 2, 2), np.float32), np.zeros((3, 2, 3, 3), np.float32), np.zeros(3, np.float32))


BOX = np.array([[10.0, 20.0, 110.0, 120.0]], np.float32)
LABEL = np.array([3], np.int64)


@pytest.mark.parametrize(
    "boxes,labels,error,message",
    [
        ([np.array([[50.0, 20.0, 50.0, 80.0]], np.float32)], [LABEL], ValueError,
         r"All bounding boxes should have positive height and width. Found invalid box \[50.0+, 20.0+, 50.0+, 80.0+\] for target at index 0"),
        ([np.array([[10.0, 90.0, 60.0, 80.0]], np.float32)], [LABEL], ValueError, r"positive height and width"),
        ([np.array([[np.nan, 0.0, 5.0, 5.0]], np.float32)], [LABEL], ValueError, r"'boxes\[0\]' box 0 is not finite"),
        ([np.zeros((1, 5), np.float32)], [LABEL], ValueError, r"'boxes\[0\]' must have shape \(n, 4\), got \(1, 5\)"),
        ([BOX.astype(np.float64)], [LABEL], TypeError, r"'boxes\[0\]' has dtype float64, expected float32"),
        ([BOX], [np.array([21], np.int64)], ValueError, r"'labels\[0\]' holds label 21 at 0, expected 0 <= label < 21"),
        ([BOX], [np.array([-1], np.int64)], ValueError, r"holds label -1"),
        ([BOX], [np.array([3], np.int32)], TypeError, r"'labels\[0\]' has dtype int32, expected int64"),
        ([BOX], [np.array([3, 4], np.int64)], ValueError, r"'labels\[0\]' must have shape \(1,\) to match boxes\[0\], got \(2,\)"),
        ([BOX, BOX], [LABEL, LABEL], ValueError, r"got 2 box arrays and 2 label arrays for a batch of 1 images"),
        (BOX, LABEL, ValueError, r"got 1 box arrays and 1 label arrays for a batch of 1 images|must have shape"),
        (None, [LABEL], TypeError, r"'boxes' and 'labels' must be lists of arrays"),
    ],
    ids=["zero-width", "negative-height", "nan", "5-columns", "float64", "label-too-big", "label-negative",
         "label-int32", "label-count", "batch-mismatch", "array-not-list", "none"],
)
def test_training_step_rejects_bad_targets(narrow_native, image, boxes, labels, error, message):
    with pytest.raises(error, match=message):
        narrow_native.forward_backward(image, boxes, labels)


def test_degenerate_box_is_rejected_by_the_reference_too():
    import torch

    from models.ssd300.reference.loss import check_targets

    with pytest.raises(ValueError, match=r"All bounding boxes should have positive height and width"):
        check_targets([torch.tensor([[50.0, 20.0, 50.0, 80.0]])], [torch.tensor([3])], 1)


def test_training_step_accepts_an_image_without_boxes(narrow_native, image):
    trace = narrow_native.forward_backward(image, [np.zeros((0, 4), np.float32)], [np.zeros(0, np.int64)])
    assert trace["loss.total"] == 0.0 and not trace["mining.negatives"].any()
    assert (trace["match.matched_idx"] == -1).all()


@pytest.fixture(scope="module")
def narrow_step(narrow_native):
    """A native step's own trace, split into what isolated replay takes: forward state, output gradients and the
    pool windows' decisions (torch's first-maximum rule, which the native pool follows)."""
    image = np.random.default_rng(0).standard_normal((1, 3, 300, 300)).astype(np.float32)
    boxes, labels = [np.array([[40.0, 50.0, 200.0, 220.0]], np.float32)], [np.array([3])]
    trace = narrow_native.forward_backward(image, boxes, labels)
    state = {k: (v.astype(np.int64) if v.dtype == np.bool_ else v) for k, v in trace.items() if "grad/" not in k}
    state["input"] = image
    grads = {k.removeprefix("grad/"): v for k, v in trace.items() if k.startswith("grad/")}
    pools = {m: tap for m, tap in module_taps(reference_model("narrow", 0, "float32")).items() if tap in POOL_INPUTS}
    argmax = {tap: window_argmax(m, torch.from_numpy(trace[POOL_INPUTS[tap]])).numpy() for m, tap in pools.items()}
    return trace, state, grads, argmax


def test_isolated_backward_of_the_own_trace_reproduces_it(narrow_native, narrow_step):
    """Every backward stage fed its own output gradient computes exactly what the whole backward did."""
    trace, state, grads, argmax = narrow_step
    gradients = [k for k in trace if "grad/" in k]
    # With the windows given, with none (the native side then takes its own on the given input), and with -1 (its
    # own) everywhere but one window per pool.
    partly = {tap: np.where(np.arange(a.size).reshape(a.shape) == 7, a, -1) for tap, a in argmax.items()}
    for given in (argmax, {}, partly):
        out = narrow_native.isolated_backward(state, grads, given, {})
        assert sorted(out) == sorted(gradients)
        assert all(np.array_equal(out[k], trace[k]) for k in gradients), [k for k in gradients if not np.array_equal(out[k], trace[k])]


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda s, g, a: a.__setitem__("backbone.pool2", a["backbone.pool2"] + 10**6), r"pool_argmax\['backbone.pool2'\] holds 10\d+, outside the 150x150 plane"),
        (lambda s, g, a: a.__setitem__("backbone.pool5", a["backbone.pool5"] - 10**6), r"pool_argmax\['backbone.pool5'\] holds -\d+, outside the 19x19 plane"),
        (lambda s, g, a: g.pop("extras.conv9_2"), r"needs grads\['extras.conv9_2'\]"),
        (lambda s, g, a: g.__setitem__("conf_head", g["conf_head"][:, :5]), r"grads\['conf_head'\] has shape \(1, 5, .*expected"),
        (lambda s, g, a: s.pop("backbone.conv4_3"), r"isolated stage 'backward' needs input 'backbone.conv4_3'"),
        (lambda s, g, a: s.__setitem__("match.labels", s["match.labels"] + 100), r"'match.labels' holds label 10\d, expected"),
        (lambda s, g, a: s.__setitem__("mining.negatives", s["mining.negatives"].astype(bool)), r"taps\['mining.negatives'\]' has dtype bool, expected int64"),
    ],
    ids=["argmax-past-plane", "argmax-negative", "grad-missing", "grad-misshaped", "tap-missing", "label-range", "index-dtype"],
)
def test_isolated_backward_rejects_bad_input(narrow_native, narrow_step, change, message):
    state, grads, argmax = (dict(d) for d in narrow_step[1:])
    change(state, grads, argmax)
    with pytest.raises((ValueError, TypeError), match=message):
        narrow_native.isolated_backward(state, grads, argmax, {})


def test_isolated_relu_mask_must_name_a_relu_with_its_shape(narrow_native, narrow_step):
    _, state, grads, argmax = narrow_step
    with pytest.raises(ValueError, match=r"relu_pass names 'backbone.pool1', which is not a ReLU's output"):
        narrow_native.isolated_backward(state, grads, argmax, {"backbone.pool1": np.ones((1,), np.uint8)})
    with pytest.raises(ValueError, match=r"relu_pass\['backbone.conv1_1'\] has shape \(1,\), expected"):
        narrow_native.isolated_backward(state, grads, argmax, {"backbone.conv1_1": np.ones((1,), np.uint8)})


def test_isolated_loss_stages_name_missing_and_misshaped_inputs(narrow_native):
    with pytest.raises(ValueError, match=r"isolated stage 'mining.negatives' needs input 'match.labels'"):
        narrow_native.isolated("mining.negatives", {"loss.cls_per_prior": np.zeros((1, 8732), np.float32)})
    with pytest.raises(ValueError, match=r"input 'loss.cls_per_prior' has shape \(1, 7\), expected \(1, 8732\)"):
        narrow_native.isolated("mining.negatives", {"loss.cls_per_prior": np.zeros((1, 7), np.float32),
                                                    "match.labels": np.zeros((1, 8732), np.int64)})
    with pytest.raises(ValueError, match=r"isolated matching got ground truth for 0 images, expected 2"):
        narrow_native.isolated("match.labels", {"priors": np.zeros((8732, 4), np.float32),
                                                "loc_head": np.zeros((2, 8732, 4), np.float32)})
    with pytest.raises(ValueError, match=r"no isolated stage produces 'loss.nothing'"):
        narrow_native.isolated("loss.nothing", {})

"""The native SGD update equals torch.optim.SGD bit for bit: weights and momentum buffers, from the first step
(buffer created from the gradient) on, with weight decay, dampening and Nesterov."""

import numpy as np
import pytest
import torch

import ssd_native
from parity.cases import scenario_for

CONFIGS = [
    dict(lr=1e-3),
    dict(lr=1e-3, momentum=0.9, weight_decay=5e-4),
    dict(lr=3e-4, momentum=0.9, dampening=0.1, weight_decay=1e-3),
    dict(lr=1e-3, momentum=0.8, nesterov=True, weight_decay=5e-4),
]


@pytest.mark.parametrize("config", CONFIGS, ids=[str(c) for c in CONFIGS])
def test_native_sgd_equals_torch_sgd_bit_for_bit(narrow_weights, config):
    scenario = scenario_for("narrow", 2)
    images, targets = scenario.images(), scenario.targets()
    model = ssd_native.ModelFloat32(narrow_weights)
    params = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in narrow_weights.items()}
    optimizer = torch.optim.SGD(list(params.values()), **config)
    for step in range(3):
        trace = model.forward_backward(images, [b for b, _ in targets], [l for _, l in targets])
        for key, param in params.items():  # the same gradients on both sides: only the update is compared
            param.grad = torch.from_numpy(trace[f"param_grad/{key}"].copy())
        model.sgd_step(**config)
        optimizer.step()
        weights, buffers = model.state_dict(), model.momentum_buffers()
        assert all(np.isfinite(w).all() for w in weights.values())
        differ = [k for k, p in params.items() if not np.array_equal(weights[k], p.detach().numpy())]
        assert not differ, f"step {step}: weights differ in {differ[:3]}"
        if config.get("momentum"):
            differ = [k for k, p in params.items()
                      if not np.array_equal(buffers[k], optimizer.state[p]["momentum_buffer"].numpy())]
            assert not differ, f"step {step}: momentum buffers differ in {differ[:3]}"
        else:
            assert buffers == {}


def test_train_step_returns_the_loss_before_the_update(narrow_weights):
    scenario = scenario_for("narrow", 1)
    images, (boxes, labels) = scenario.images(), scenario.targets()[0]
    model = ssd_native.ModelFloat32(narrow_weights)
    before = model.evaluate(images, [boxes], [labels])
    assert model.train_step(images, [boxes], [labels], lr=1e-3, momentum=0.9) == before
    after = model.evaluate(images, [boxes], [labels])
    assert after["loss.total"] < before["loss.total"]


@pytest.mark.parametrize("kwargs,message", [
    (dict(lr=-1.0), r"Invalid learning rate: -1"),
    (dict(lr=float("nan")), r"Invalid learning rate: nan"),
    (dict(lr=0.1, momentum=-0.5), r"Invalid momentum value: -0.5"),
    (dict(lr=0.1, weight_decay=-1.0), r"Invalid weight_decay value: -1"),
    (dict(lr=0.1, nesterov=True), r"Nesterov momentum requires a momentum and zero dampening"),
])
def test_bad_optimizer_arguments_are_rejected_before_anything_changes(narrow_weights, kwargs, message):
    model = ssd_native.ModelFloat32(narrow_weights)
    image = np.zeros((1, 3, 300, 300), np.float32)
    with pytest.raises(ValueError, match=message):
        model.train_step(image, [np.zeros((0, 4), np.float32)], [np.zeros(0, np.int64)], **kwargs)
    assert all(np.array_equal(model.state_dict()[k], v) for k, v in narrow_weights.items())


def test_sgd_step_needs_a_training_step_first(narrow_weights):
    with pytest.raises(RuntimeError, match="sgd_step needs the parameter gradients of a training step"):
        ssd_native.ModelFloat32(narrow_weights).sgd_step(lr=0.1)


@pytest.mark.parametrize("update", ["train_step", "sgd_step"])
def test_a_deployed_forward_after_an_update_uses_the_new_weights(narrow_weights, update):
    """forward(all_taps=False) keeps each layer's packed weights between calls: the heads must equal a full forward
    of the same model, and after an update those of a fresh model built from the updated weights."""
    scenario = scenario_for("narrow", 2)
    images, targets = scenario.images(), scenario.targets()
    boxes, labels = [b for b, _ in targets], [l for _, l in targets]
    model = ssd_native.ModelFloat32(narrow_weights)

    def heads(m, all_taps):
        out = m.forward(images, all_taps=all_taps)
        return out["loc_head"], out["conf_head"]

    for _ in range(2):  # the second call reads the kept packing
        for deployed, full in zip(heads(model, False), heads(model, True)):
            np.testing.assert_array_equal(deployed, full)
    if update == "train_step":
        model.train_step(images, boxes, labels, lr=0.1, momentum=0.9)
    else:
        model.forward_backward(images, boxes, labels)
        model.sgd_step(lr=0.1)
    updated = ssd_native.ModelFloat32(model.state_dict())
    for deployed, fresh in zip(heads(model, False), heads(updated, False)):
        np.testing.assert_array_equal(deployed, fresh)

"""A trace the native model returns owns its arrays: the model hands its tensors over instead of keeping a second
copy (a full-SSD300 batch-4 trace is gigabytes), and nothing the model does later reaches a trace already returned."""

import gc

import numpy as np

import ssd_native
from parity.cases import scenario_for


def test_a_returned_trace_outlives_later_runs_and_the_model(narrow_weights):
    scenario = scenario_for("narrow", 2)
    images, targets = scenario.images(), scenario.targets()
    boxes, labels = [b for b, _ in targets], [l for _, l in targets]
    model = ssd_native.ModelFloat32(narrow_weights)
    trace = model.forward_backward(images, boxes, labels)
    forward = model.forward(images)
    kept = {name: value.copy() for name, value in {**trace, **forward}.items()}
    assert all(value.flags.writeable and value.flags.c_contiguous for value in trace.values())

    other = model.forward_backward(np.ascontiguousarray(images[::-1]), boxes[::-1], labels[::-1])
    assert not np.array_equal(other["backbone.conv1_1"], trace["backbone.conv1_1"])
    model.isolated("backbone.conv1_1", {"input": images})
    del model, other
    gc.collect()
    changed = [name for name, value in {**trace, **forward}.items() if not np.array_equal(value, kept[name])]
    assert not changed, f"returned arrays changed after later calls: {changed[:5]}"
    assert np.array_equal(trace["backbone.conv1_1"], forward["backbone.conv1_1"])


def test_the_last_steps_parameter_gradients_stay_for_the_update(narrow_weights):
    scenario = scenario_for("narrow", 1)
    targets = scenario.targets()
    model = ssd_native.ModelFloat32(narrow_weights)
    trace = model.forward_backward(scenario.images(), [b for b, _ in targets], [l for _, l in targets])
    before = model.state_dict()
    model.sgd_step(lr=0.5)
    moved = [k for k, w in model.state_dict().items() if trace[f"param_grad/{k}"].any() and np.array_equal(w, before[k])]
    assert not moved, f"weights with a gradient that sgd_step did not move: {moved[:3]}"

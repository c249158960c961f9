"""Isolated replay: each native stage fed the reference's own inputs for that stage, so a stage's own error is
told apart from the error it inherited. A bug in one stage fails there and only there; the stages after it, fed
correct inputs, pass.

Stages, in execution order: every forward op (conv, pool, L2Norm, head conv, head join) and the priors; the loss in four stages
(matching, per-prior class loss, hard negative mining, loss sums); and every backward stage, each started from
the reference's gradient of its output, with the reference's forward state (activations and the max-pool and
ReLU decisions its backward used)."""

import numpy as np
import torch

from parity.core.compare import TensorResult, compare_tensor, judge_exact_probe, judge_typical
from parity.core.error_model import backward, forward, typical
from parity.core.error_model.graph import consumers
from parity.core.error_model.probe import conv_probe
from parity.core.error_model.rounding import U
from parity.core.heap import large_blocks_returned

from .reference.routing import replayed_relu_pass
from .reference.step import backward_order
from .reference.taps import FORWARD_TAPS, stage_inputs
from .rules import RULES
from .sides import reference_model_for
from .spec import build_stages

# Loss stage (named by its first output) -> the reference taps it reads; matching also reads the ground truth.
LOSS_STAGES = {
    "match.matched_idx": ["priors"],  # -> match.matched_idx, match.labels, targets.loc
    "loss.cls_per_prior": ["conf_head", "match.labels"],
    "mining.negatives": ["loss.cls_per_prior", "match.labels"],
    "loss.total": ["loc_head", "targets.loc", "loss.cls_per_prior", "match.matched_idx", "match.labels",
                   "mining.negatives"],  # -> loss.loc, loss.conf, loss.total
}


# What each loss stage produces (the tensors a stage that raised fails at).
LOSS_STAGE_OUTPUTS = {
    "match.matched_idx": ["match.matched_idx", "match.labels", "targets.loc"],
    "loss.cls_per_prior": ["loss.cls_per_prior"],
    "mining.negatives": ["mining.negatives"],
    "loss.total": ["loss.loc", "loss.conf", "loss.total"],
}


# A tensor an isolated stage computes from its own other outputs (loss.total = loss.loc + loss.conf, all three from
# the loss-sum stage): held to the sum of their bounds, plus the addition's rounding, not to the propagated rule's,
# which reads the deviations the reference's own loss.loc and loss.conf had.
COMPOSED = {"loss.total": ("loss.loc", "loss.conf")}


def _native_input(value: np.ndarray) -> np.ndarray:
    """Index taps travel as int64 (mining.negatives is bool in the traces)."""
    return np.ascontiguousarray(value.astype(np.int64) if value.dtype == np.bool_ else value)


def _isolated(name, traces, native, reference, context=None):
    scenario = traces.scenario
    # The stage was fed the reference's inputs: its output is held to the reference's own bound (own rounding plus
    # the reference's input deviations carried through the stage).
    bound = traces.reference_bounds.get(name)
    if name in COMPOSED and all(part in traces.reference_bounds for part in COMPOSED[name]):
        bound = sum(traces.reference_bounds[part].astype(np.float64) for part in COMPOSED[name])
        bound = bound + 2 * U * np.abs(traces.oracle[name])
    result = compare_tensor(RULES, name, scenario.id, scenario.batch_size, native, reference[name], traces.oracle[name],
                            context=context, bounds=None if bound is None else (bound, bound))
    result.mode = "isolated"
    return result


def _raised(names, traces, error: Exception) -> list:
    """A stage that raised fails, with the native module's message, at every tensor it should have produced."""
    scenario = traces.scenario
    reason = f"the isolated stage raised {type(error).__name__}: {error}"
    return [TensorResult(name, RULES.kind(name), scenario.id, scenario.batch_size, list(np.shape(traces.reference[name])),
                         str(traces.reference[name].dtype), "fail", [reason], mode="isolated") for name in names]


def _judge_typical(result, stage, inputs, weights, native, reference) -> None:
    """judge_typical on a convolution stage: its exact result on the inputs both sides were fed and the
    typical-error model's variance (parity/core/error_model/typical.py), on typical.channel_subset's channels."""
    x = torch.from_numpy(np.asarray(inputs[stage.inputs[0]], dtype=np.float64))
    batch, out_channels, height, width = np.shape(reference)
    chosen = typical.channel_subset(out_channels, batch * height * width)
    rows = torch.from_numpy(chosen)
    exact, variance = forward.conv_typical(stage.module, x, weights[stage.weight_key][rows],
                                           weights[stage.bias_key][rows], stage.relu)
    judge_typical(result, native[:, chosen], reference[:, chosen], exact.numpy(), variance.numpy(), 1, chosen)


def _judge_probe(result, stage, input_shape, weights, native_model) -> None:
    """judge_probe on a convolution stage: both sides fed parity.core.error_model.probe's exact probe, whose float32
    result is the same bit for bit in any order of summation; the native side differing fails, the reference
    differing is a harness error."""
    if not getattr(native_model, "runs_any_input", True):  # a port's stages over files ran on the reference's inputs
        return
    conv = stage.module
    weight = weights[stage.weight_key]
    bias = weights[stage.bias_key] if stage.bias_key else torch.zeros(len(weight), dtype=torch.float64)
    probe = conv_probe(conv, weight, bias, input_shape, stage.relu)
    with torch.no_grad():
        reference = torch.nn.functional.conv2d(torch.from_numpy(probe["input"]), conv.weight, conv.bias, conv.stride,
                                               conv.padding, conv.dilation)
    reference = (torch.relu(reference) if stage.relu else reference).numpy()
    try:
        native = native_model.isolated(stage.tap, {stage.inputs[0]: probe["input"]})[stage.tap]
    except Exception as error:  # the native module raises; it never crashes the process
        native, problem = None, f"the exact probe raised {type(error).__name__}: {error}"
    else:
        problem = (None if np.shape(native) == np.shape(reference) else
                   f"the exact probe's result has shape {list(np.shape(native))}, expected {list(np.shape(reference))}")
    if problem:
        result.reasons.append(problem)
        result.verdict = "fail"
        return
    judge_exact_probe(result, native, reference, probe["expected"], probe["magnitude"], probe["unseen"])


def forward_stage_results(traces, native_model) -> list:
    """Every forward stage on the reference's inputs. A convolution, whose two sides then compute the same sums from
    the same operands, is also held to the typical size of float32's rounding error (judge_typical): an error many
    times the natural one fails there even where it stays within the worst-case bound."""
    images = traces.scenario.images()
    model = reference_model_for(traces.scenario)
    stages = build_stages(model)
    weights = {key: value.detach().to(torch.float64) for key, value in model.state_dict().items()}
    results = []
    for tap in FORWARD_TAPS:
        inputs = {name: images if name == "input" else np.ascontiguousarray(traces.reference[name])
                  for name in stage_inputs(tap)}
        try:
            output = native_model.isolated(tap, inputs)[tap]
        except Exception as error:  # the native module raises; it never crashes the process
            results += _raised([tap], traces, error)
            continue
        result = _isolated(tap, traces, output, traces.reference)
        if stages[tap].kind == "conv" and np.shape(output) == np.shape(traces.reference[tap]):
            _judge_typical(result, stages[tap], inputs, weights, output, traces.reference[tap])
            _judge_probe(result, stages[tap], np.shape(inputs[stages[tap].inputs[0]]), weights, native_model)
        results.append(result)
    return results


def loss_stage_results(traces, native_model) -> list:
    reference = traces.reference
    boxes, labels = zip(*traces.scenario.targets())
    boxes = [np.ascontiguousarray(b, dtype=np.float32) for b in boxes]
    # Mining was fed the reference's losses: both sides rank the same float32 values, so only an exact tie may go
    # either way (a window of 0).
    mining_context = {"reference_loss": reference["loss.cls_per_prior"], "native_loss": reference["loss.cls_per_prior"],
                      "reference_labels": reference["match.labels"], "loss_window": 0.0}
    results = []
    for stage, input_taps in LOSS_STAGES.items():
        inputs = {name: _native_input(reference[name]) for name in input_taps}
        try:
            outputs = native_model.isolated(stage, inputs, list(boxes), list(labels))
        except Exception as error:
            results += _raised(LOSS_STAGE_OUTPUTS[stage], traces, error)
            continue
        for name, value in outputs.items():
            results.append(_isolated(name, traces, value, reference, {name: mining_context} if name in RULES.selections else None))
    return results


def backward_stage_results(traces, native_model) -> list:
    reference, reference_model = traces.reference, reference_model_for(traces.scenario)
    forward_state = {name: _native_input(value) for name, value in reference.items() if RULES.kind(name) in
                     ("activation", "exact", "index", "scalar")}
    forward_state["input"] = traces.scenario.images()
    grads = {name.removeprefix("grad/"): np.ascontiguousarray(value) for name, value in reference.items()
             if name.startswith("grad/")}
    relu_pass = replayed_relu_pass(reference, traces.routing)
    # The native side takes its own pooling decisions on the reference's values, so a wrong argmax shows here too;
    # only a window where the reference's backward took a near-tie's other choice is given that choice (-1: the
    # native's own).
    tied_windows = {tap: torch.where(mask, choice, -1).numpy() for tap, (kind, choice, mask) in traces.routing.items()
                    if kind == "pool"}
    try:
        outputs = native_model.isolated_backward(forward_state, grads, tied_windows,
                                                 {tap: m.numpy().astype(np.uint8) for tap, m in relu_pass.items()})
    except Exception as error:
        return _raised(backward_order(reference_model), traces, error)
    results = {name: _isolated(name, traces, outputs.get(name), reference) for name in backward_order(reference_model)}
    _judge_backward_typical(results, outputs, traces, build_stages(reference_model), reference_model, relu_pass)
    return list(results.values())


def _judge_backward_typical(results, outputs, traces, stages, reference_model, relu_pass) -> None:
    """judge_typical on the isolated backward's sums, from the operands both sides were fed (the reference's
    activations and output gradients, after the ReLU's masks): each convolution's weight gradient, and the gradient
    of each tap that only convolutions read (what a pool, the L2Norm or the head join adds is exact or judged by its
    bound alone)."""
    reference = traces.reference

    def output_grad(stage):  # (B,OC,OH,OW) float32 (the models take float64 one image at a time): the reference's
        grad = torch.from_numpy(reference[f"grad/{stage.tap}"])  # gradient of the conv's output, through its ReLU
        if not stage.relu:
            return grad
        return grad * (relu_pass[stage.tap] if stage.tap in relu_pass else torch.from_numpy(reference[stage.tap] > 0))

    weights = {key: value.detach().to(torch.float64) for key, value in reference_model.state_dict().items()}
    readers = {"input": [stage for stage in stages.values() if "input" in stage.inputs], **consumers(stages)}
    for tap, tap_readers in readers.items():
        convs = [stage for stage in tap_readers if stage.kind == "conv"]
        grads = {stage.tap: output_grad(stage) for stage in convs}  # each masked once, for both verdicts below
        for stage in convs:
            name = f"param_grad/{stage.weight_key}"
            if np.shape(outputs.get(name)) == np.shape(reference[name]):
                x = torch.from_numpy(traces.scenario.images() if tap == "input" else reference[tap])
                _judge_weight_typical(results[name], stage, x, grads[stage.tap], outputs[name], reference[name])
        name = f"grad/{tap}"
        if (name in results and convs and len(convs) == len(tap_readers)
                and np.shape(outputs.get(name)) == np.shape(reference[name])):
            batch, channels, height, width = np.shape(reference[name])
            chosen = typical.channel_subset(channels, batch * height * width)
            operands = [(stage.module, weights[stage.weight_key], grads[stage.tap]) for stage in convs]
            exact, variance = backward.conv_input_typical(operands, np.shape(reference[name]), chosen)
            judge_typical(results[name], outputs[name][:, chosen], reference[name][:, chosen], exact.numpy(),
                          variance.numpy(), 1, chosen)


def _judge_weight_typical(result, stage, x, grad, native, reference) -> None:
    """judge_typical on a convolution's weight gradient (x its input, grad its output gradient after the ReLU's mask):
    its exact value and the typical-error model's variance on typical.weight_subset's elements, output channel by
    output channel too."""
    out_channels, in_channels, kh, kw = np.shape(reference)
    rows, cols = typical.weight_subset(out_channels, in_channels, kh * kw)
    exact, variance = backward.conv_weight_typical(stage.module, x, grad, torch.from_numpy(rows),
                                                   torch.from_numpy(cols))
    pick = np.ix_(rows, cols)
    judge_typical(result, native[pick], reference[pick], exact.numpy(), variance.numpy(), 0, rows)


def isolated_results(traces, native_model) -> list:
    """-> TensorResults (mode "isolated") for every stage the traces cover, in execution order: forward stages,
    then, for a whole training step, loss stages and backward stages.

    Each stage's inputs, outputs and verdict temporaries, of many sizes, go back to the system as they are freed: a
    heap that keeps them fragments (the full SSD300's batch-2 case: one pytest test of it peaked at 6.81 GB
    resident in the replay, 6.10 GB with this; the replay took 54-55 s against 56-57 s, alternated in one process)."""
    with large_blocks_returned():
        results = forward_stage_results(traces, native_model)
        if "loss.total" in traces.reference:
            results += loss_stage_results(traces, native_model)
        if any(name.startswith("grad/") for name in traces.reference):
            results += backward_stage_results(traces, native_model)
    return results

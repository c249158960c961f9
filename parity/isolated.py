"""Isolated replay: each native forward stage (conv, pool, L2Norm, head conv, head join) fed the reference's own
input for that stage, so a stage's own error is told apart from the error it inherited. A bug in one stage fails
there and only there; the stages after it, fed correct inputs, pass."""

import numpy as np

from reference.taps import FORWARD_TAPS, stage_inputs

from .compare import compare_tensor

ISOLATED_TAPS = [t for t in FORWARD_TAPS if t != "priors"]


def isolated_results(traces, native_model) -> list:
    """-> TensorResults (mode "isolated") for every forward stage, in execution order."""
    scenario = traces.scenario
    images = scenario.images()
    results = []
    for tap in ISOLATED_TAPS:
        inputs = {name: images if name == "input" else np.ascontiguousarray(traces.reference[name])
                  for name in stage_inputs(tap)}
        output = native_model.isolated(tap, inputs)
        result = compare_tensor(tap, scenario.id, scenario.batch_size, output, traces.reference[tap], traces.oracle[tap])
        result.mode = "isolated"
        results.append(result)
    return results

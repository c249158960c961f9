"""The isolated replay over files, for a port that is not a Python module.

`python -m parity stage-inputs --scenario S --batch-size B --out DIR` writes, as a dump (parity/dump.py, with an
index.txt for C), the reference's inputs to every stage the harness replays in isolation: every forward and loss
tap, `input` (the images), every `grad/<tap>` (each backward stage starts from the gradient of its output) and
`relu_pass/<tap>` (where a replayed ReLU let the gradient through); and DIR/stages.txt, one stage a line:

    group stage outputs inputs          (comma-separated names, "-" for none, "*" for all; group: forward, loss or
                                         backward; the backward stage reads every tensor, matching also the boxes
                                         and labels of the inputs)

A port computes each stage from those inputs alone and adds its outputs to its dump as `isolated/<name>`; compare
then gives the isolated verdicts and first divergence, as for this project's own module (models/ssd300/isolated.py runs
the same code over the dump, through DumpedStages). The reference is the one a dump without tensors of its own
is compared to (run_sides with an empty native trace), so both runs see the same values. The exact probes of the
isolated convolutions (docs/tolerance.md) need a port that runs any input: over files they are not run.
"""

from pathlib import Path

import numpy as np

from models.ssd300.isolated import LOSS_STAGE_OUTPUTS, LOSS_STAGES
from models.ssd300.reference.routing import replayed_relu_pass
from models.ssd300.reference.step import backward_order
from models.ssd300.reference.taps import FORWARD_TAPS, stage_inputs
from models.ssd300.scenarios import Scenario
from models.ssd300.sides import reference_model_for, run_sides

from .dump_manifest import ISOLATED, harness_name


def stage_list(scenario: Scenario) -> list:
    """[(group, stage, outputs, inputs)] in execution order."""
    stages = [("forward", tap, [tap], list(stage_inputs(tap))) for tap in FORWARD_TAPS]
    stages += [("loss", stage, LOSS_STAGE_OUTPUTS[stage], inputs) for stage, inputs in LOSS_STAGES.items()]
    order = backward_order(reference_model_for(scenario))
    return stages + [("backward", "backward", order, ["*"])]  # every tensor of the stage inputs


def reference_for_stages(scenario: Scenario):
    """The sides a dump with no tensors of its own is compared with: what stage inputs come from, and what the
    isolated outputs are judged against."""
    return run_sides(scenario, step=True, native={})


def write_stage_inputs(directory: Path, scenario: Scenario) -> Path:
    from .dump import write_dump
    from .dump_inputs import checksums, scenario_inputs

    traces = reference_for_stages(scenario)
    reference = traces.reference
    tensors = {"input": scenario.images()}
    tensors.update({name: value for name, value in reference.items() if not name.startswith("param_grad/")})
    relu_pass = replayed_relu_pass(reference, traces.routing)
    tensors.update({f"relu_pass/{tap}": mask.numpy().astype(np.uint8) for tap, mask in relu_pass.items()})
    write_dump(directory, scenario.name, scenario.batch_size, tensors, checksums(scenario_inputs(scenario)),
               index=True)
    lines = [" ".join([group, stage, ",".join(outputs), ",".join(inputs) or "-"])
             for group, stage, outputs, inputs in stage_list(scenario)]
    (Path(directory) / "stages.txt").write_text("\n".join(lines) + "\n")
    return Path(directory)


class DumpedStages:
    """A port's isolated outputs (`isolated/<name>` in its dump) behind the native model's isolated API, so that
    models/ssd300/isolated.py judges them exactly as it judges this project's module. A stage whose outputs the dump
    lacks raises, which fails that stage with the message."""

    runs_any_input = False  # its stages ran on the reference's inputs alone: the exact probes cannot be fed to it

    def __init__(self, isolated: dict):
        self.outputs = isolated

    def _take(self, names: list) -> dict:
        missing = [n for n in names if n not in self.outputs]
        if missing:
            raise LookupError(f"the dump does not provide {', '.join(ISOLATED + n for n in missing)}")
        return {n: self.outputs[n] for n in names}

    def isolated(self, stage, inputs, boxes=None, labels=None) -> dict:
        return self._take(LOSS_STAGE_OUTPUTS.get(stage, [stage]))

    def isolated_backward(self, forward_state, grads, pool_argmax, relu_pass) -> dict:
        return {n: v for n, v in self.outputs.items() if n.startswith(("grad/", "param_grad/"))}


def split_isolated(trace: dict) -> tuple:
    """A dump's tensors -> (its propagated trace, its isolated outputs by the stage output's name)."""
    isolated = {harness_name(n): v for n, v in trace.items() if n.startswith(ISOLATED)}
    return {n: v for n, v in trace.items() if not n.startswith(ISOLATED)}, isolated


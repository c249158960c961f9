"""The sweep `pytest parity/` runs: every scenario fixture on the narrow config at batch 1, 2 and 4 (two_steps,
decision_boundaries and photos at 2), and the full SSD300 at batch 1 (the default scenario) and 2 (small_objects:
its second image's small boxes give every head level and the L2Norm gradient, which the default scene's first two
images do not). Each case runs the whole training step once per process on all four sides; tests read its
per-tensor results.

The full SSD300 at batch 4 is `make parity`'s (the default scenario at batch 1, 2 and 4): its case alone holds about
10 GB, past the 7 GB make test aims at (a standard CI runner's memory), and what batch 4 adds over batch 2 (more
than one image per batch: a batch-wide mining or concatenation bug) the narrow cases at batch 2 and 4 and the full
SSD300 at batch 2 cover."""

from contextlib import nullcontext
from functools import lru_cache

import numpy as np

from models.ssd300.case import run_case
from models.ssd300.facts import scenario_facts
from models.ssd300.reference.loss import LOSS_TAPS
from models.ssd300.reference.step import step_order
from models.ssd300.reference.taps import FORWARD_TAPS
from models.ssd300.scenarios import load_scenarios
from models.ssd300.sides import reference_model, run_sides

from .core.heap import large_blocks_returned, release_memory

NARROW_SCENARIOS = ["narrow", "empty_image", "many_boxes", "border_tiny_shared", "large_logits", "zero_image"]
CASES = ([("default", 1), ("small_objects", 2)] + [(name, b) for name in NARROW_SCENARIOS for b in (1, 2, 4)]
         + [("two_steps", 2), ("decision_boundaries", 2), ("photos", 2)])


@lru_cache(maxsize=None)
def scenario_for(name: str, batch_size: int):
    return load_scenarios(name, [batch_size])[0]


def case_id(name: str, batch_size: int) -> str:
    return scenario_for(name, batch_size).id


@lru_cache(maxsize=1)
def traces_for(name: str, batch_size: int):
    """All four sides of one case (large: only the latest is kept)."""
    return run_sides(scenario_for(name, batch_size))


# The running test's xdist group, set per test by parity/conftest.py in a pytest-xdist worker (None elsewhere).
running_xdist_group: str | None = None


def case_summary(name: str, batch_size: int) -> dict:
    """Everything the tests read about one case (see _case_summary). In a pytest-xdist worker, a test outside the
    full-SSD300 group that reads a full-SSD300 case is an error: run beside another such case it would take a 24 GB
    machine past its memory (seen: two workers at 12 GB each, one killed)."""
    if (running_xdist_group is not None and scenario_for(name, batch_size).config == "ssd300"
            and running_xdist_group != FULL_SSD300_GROUP):
        raise RuntimeError(f"case {case_id(name, batch_size)} is the full SSD300 (about 20 GB at batch 4), read from a "
                           f"test in xdist group {running_xdist_group!r}: mark the test "
                           f"@pytest.mark.xdist_group(FULL_SSD300_GROUP) so it never runs beside another such case")
    return _case_summary(name, batch_size)


@lru_cache(maxsize=None)
def _case_summary(name: str, batch_size: int) -> dict:
    """Everything the tests read about one case, computed while its traces are at hand: per-tensor results (in
    execution order), scenario facts and parameter-gradient coverage. The traces themselves are not kept: the full
    SSD300 at batch 4 holds several GB of them (four sides, activations and gradients)."""
    summary = {}

    def facts(traces, propagated):
        summary.update({
            "results": {r.name: r for r in propagated},
            "facts": scenario_facts(traces.scenario, traces.reference, traces.native),
            "coverage": _coverage(traces),
            "gradient_coverage": {name: bool(np.any(value)) for name, value in traces.oracle.items()
                                  if name.startswith("grad/")},
        })

    scenario = scenario_for(name, batch_size)
    # A full-SSD300 case returns its large freed blocks to the system at once, its sides' steps too: over a heap
    # that the tests before it had shaped, keeping them let make test's peak reach 7.06 GB in the batch-2
    # small_objects case, 6.40 GB when test_backward.py ran alone.
    with large_blocks_returned() if scenario.config == "ssd300" else nullcontext():
        summary["isolated"] = [r for r in run_case(scenario, inspect=facts) if r.mode == "isolated"]
    release_memory()
    return summary


def isolated_for(name: str, batch_size: int) -> list:
    return case_summary(name, batch_size)["isolated"]


def results_for(name: str, batch_size: int) -> dict:
    return case_summary(name, batch_size)["results"]


def facts_for(name: str, batch_size: int) -> dict:
    return case_summary(name, batch_size)["facts"]


def parameter_coverage(name: str, batch_size: int) -> dict:
    return case_summary(name, batch_size)["coverage"]


def gradient_coverage(name: str, batch_size: int) -> dict:
    """grad/<tap> -> whether the oracle's gradient there is non-zero in this case (its stage's backward is exercised)."""
    return case_summary(name, batch_size)["gradient_coverage"]


def _coverage(traces) -> dict:
    """state_dict key -> {"shape_ok", "finite", "native_nonzero", "reference_nonzero"}."""
    coverage = {}
    for name, reference in traces.reference.items():
        if not name.startswith("param_grad/"):
            continue
        native = traces.native.get(name)
        coverage[name.removeprefix("param_grad/")] = {
            "shape_ok": native is not None and native.shape == reference.shape,
            "finite": native is not None and bool(np.isfinite(native).all()),
            "native_nonzero": native is not None and bool(native.any()),
            "reference_nonzero": bool(reference.any()),
        }
    return coverage


def tensor_names() -> dict:
    """kind -> tensor names, from the reference's own structure (the same for every config)."""
    order = step_order(reference_model("narrow", 0, "float32"))
    return {"forward": FORWARD_TAPS, "loss": LOSS_TAPS, "backward": order[len(FORWARD_TAPS) + len(LOSS_TAPS):]}


# Every run of the full SSD300 shares one xdist group: its batch-4 case needs about 20 GB, so two such runs must
# never share a 24 GB machine. Narrow cases (a few hundred MB) get a group each.
FULL_SSD300_GROUP = "full-ssd300"


def xdist_group(name: str, batch_size: int):
    import pytest

    scenario = scenario_for(name, batch_size)
    return pytest.mark.xdist_group(FULL_SSD300_GROUP if scenario.config == "ssd300" else scenario.id)


def sweep_params(kinds: tuple) -> list:
    """pytest params (scenario, batch size, tensor) for every case and every tensor of the given kinds, with
    readable ids such as ssd300-B4-conf_head. A case's tests share one xdist group: under `--dist loadgroup` one
    worker runs the case once, not every worker (and the full SSD300's cases one after another: xdist_group)."""
    import pytest

    names = [n for kind in kinds for n in tensor_names()[kind]]
    return [pytest.param(s, b, n, id=f"{case_id(s, b)}-{n}", marks=xdist_group(s, b))
            for s, b in CASES for n in names]


def case_params() -> list:
    """pytest params (scenario, batch size) for every case, grouped as sweep_params."""
    import pytest

    return [pytest.param(s, b, id=case_id(s, b), marks=xdist_group(s, b)) for s, b in CASES]


def judge(scenario_name: str, batch_size: int, tensor: str, record) -> None:
    """Record one tensor's result in the report and assert it passed, explaining it if not."""
    from .core.explain import explain

    results = results_for(scenario_name, batch_size)
    assert tensor in results, f"{tensor!r} was not produced; produced: {sorted(results)}"
    record(results[tensor])
    assert results[tensor].passed, explain(results[tensor])

"""Run scenarios on every side and compare them: the main job of `make parity`."""

from .compare import compare_traces
from .sides import run_sides


def compare_scenario(scenario) -> list:
    traces = run_sides(scenario)
    return compare_traces(scenario.id, scenario.batch_size, traces.native, traces.reference, traces.oracle, traces.native64)

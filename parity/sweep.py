"""Run scenarios on every side and compare them: the main job of `make parity`."""

from .compare import compare_sides
from .sides import run_sides


def compare_scenario(scenario) -> list:
    return compare_sides(run_sides(scenario))

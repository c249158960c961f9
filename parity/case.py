"""One case end to end, the pipeline every caller runs: the scenario on every side (parity/sides.py), the
propagated comparison (parity/compare.py), then every stage replayed in isolation (parity/isolated.py)."""

from .compare import compare_sides
from .isolated import isolated_results
from .sides import native_model_for, run_sides


def run_case(scenario, inspect=None) -> list:
    """-> every TensorResult of the case, propagated then isolated. inspect(traces, propagated), if given, is called
    in between while every side's traces are still held (pictures of a failure, scenario facts); the native traces
    are freed after it: the isolated replay reads only the reference's and the oracle's, and reuses their memory."""
    traces = run_sides(scenario)
    propagated = compare_sides(traces)
    if inspect is not None:
        inspect(traces, propagated)
    traces.drop_native()
    return propagated + isolated_results(traces, native_model_for(scenario))

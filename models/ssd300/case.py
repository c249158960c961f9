"""One SSD300 case end to end, the pipeline every caller runs: the scenario on every side (models/ssd300/sides.py), the
propagated comparison (parity/core/compare.py, under SSD300's rules and error model), then every stage replayed in
isolation (models/ssd300/isolated.py)."""

from parity.core.compare import compare_traces, strict_checks

from .error_model import error_model_for
from .isolated import isolated_results
from .rules import RULES
from .sides import native_model_for, run_sides


def compare_sides(traces) -> list:
    """compare_traces on a models.ssd300.sides.SideTraces, the strict checks first: the float64 native trace is freed
    before the float32 sides are judged (SideTraces.drop_native64)."""
    s = traces.scenario
    strict = strict_checks(RULES, traces.native64, traces.strict_oracle) if traces.native64 is not None else None
    traces.drop_native64()  # the strict checks were its last reader
    kept = traces.reference_bounds = {}
    return compare_traces(RULES, s.id, s.batch_size, traces.native, traces.reference, traces.oracle,
                          routing_ties=traces.routing_ties, error_model=error_model_for(traces), kept_bounds=kept,
                          strict=strict)


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

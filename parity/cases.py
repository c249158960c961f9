"""The sweep `pytest parity/` runs: breadth on the narrow config, the full SSD300 at representative batch sizes.

Each case is computed once per process and shared by every test that reads it.
"""

from functools import lru_cache

from .compare import compare_traces
from .scenario import load_scenarios
from .sides import run_sides

# (scenario fixture, batch size)
FORWARD_CASES = [("default", 1), ("default", 4), ("narrow", 1), ("narrow", 2), ("narrow", 4)]


@lru_cache(maxsize=None)
def scenario_for(name: str, batch_size: int):
    return load_scenarios(name, [batch_size])[0]


@lru_cache(maxsize=4)
def traces_for(name: str, batch_size: int):
    return run_sides(scenario_for(name, batch_size))


@lru_cache(maxsize=None)
def forward_results(name: str, batch_size: int) -> dict:
    """tap name -> TensorResult for one case."""
    scenario = scenario_for(name, batch_size)
    t = traces_for(name, batch_size)
    results = compare_traces(scenario.id, batch_size, t.native, t.reference, t.oracle, t.native64)
    return {r.name: r for r in results}


def case_id(name: str, batch_size: int) -> str:
    return scenario_for(name, batch_size).id

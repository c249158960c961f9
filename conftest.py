"""Hypothesis profiles for every test under tests/ and parity/, loaded before any test module is imported, and
the run's peak memory, printed at its end.

`ci` (the default: make test, make sweep, make asan and the CI gate) is derandomized and keeps no example
database, so every run draws the same examples and a verdict reproduces on any machine. `explore`
(HYPOTHESIS_PROFILE=explore) draws new examples each run from a seed printed in the session header, so a failure
found there reruns with --hypothesis-seed=N. Either way a failure prints the failing example and a
@reproduce_failure blob.

The peak is the whole test process tree's (pytest, its xdist workers and the CLI runs tests start), summed;
--memory-budget-gb turns a peak above the budget into a failed run. Freed memory goes back to the system after each
test module."""

import os
import random

import pytest
from hypothesis import settings

from parity.core.heap import release_memory, reuse_freed_memory
from parity.memory_peak import TreePeak

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, deadline=None, print_blob=True)
settings.load_profile(PROFILE)

# The test process tree's memory, sampled from configure to the end of the session (None in an xdist worker: the
# controller samples the workers).
_tree_peak: TreePeak | None = None
GB = 1e9


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # Runs before hypothesis's own hook reads the option, so an explore run always has a seed it can print.
    if PROFILE == "explore" and config.getoption("hypothesis_seed") is None:
        config.option.hypothesis_seed = str(random.SystemRandom().randrange(2**32))
    _share_cores_between_xdist_workers(config)
    reuse_freed_memory()
    global _tree_peak
    if not hasattr(config, "workerinput"):  # the controller: its tree holds the xdist workers too
        _tree_peak = TreePeak().start()


def pytest_addoption(parser):
    parser.addoption("--memory-budget-gb", type=float, default=None,
                     help="fail the run if the test process tree's peak resident memory exceeds this many GB")


def pytest_runtest_logstart(nodeid, location):
    if _tree_peak is not None:  # the controller hears of every test, the workers' too
        _tree_peak.label = nodeid


@pytest.hookimpl(trylast=True)  # after pytest's own teardown, so module fixtures have let their data go
def pytest_runtest_teardown(item, nextitem):
    """At the end of each test module, let go of what it cached (its functools caches, the float32 models) and hand
    the heap's freed memory back: a parity run keeps it for its next allocation (parity/core/heap.py), and a module's
    largest case would otherwise set the resident floor of every module after it (measured: make test's process
    at 4.8 GB between cases of a few hundred MB; make test's peak 9.2 GB in the full-SSD300 trajectory, 4.7 GB
    alone, with 2.3 GB of cached SSD300 models beside it)."""
    if nextitem is None or nextitem.module is not item.module:
        from models.ssd300.sides import forget_models  # loads torch and the native module

        _clear_caches_of(item.module)
        forget_models()
        release_memory()


def _clear_caches_of(module) -> None:
    """Empty every functools cache a test module holds, its own or imported (measured: traces cached by tests/
    modules kept make test's process at 2.7 GB resident when the first full-SSD300 case began, 0.7 GB fresh).
    A later module that needs the same case computes it again (the narrow config: about a second)."""
    for value in list(vars(module).values()):
        if callable(getattr(value, "cache_clear", None)):
            value.cache_clear()


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if _tree_peak is None or reporter is None:
        return
    peak = _tree_peak.stop()
    budget = session.config.getoption("memory_budget_gb")
    reporter.write_line("")
    reporter.write_sep("-", f"peak memory of the test process tree: {peak / GB:.2f} GB resident (pytest and every "
                            f"process it started, summed, sampled every {_tree_peak.interval_s:g} s), during "
                            f"{_tree_peak.label_at_peak}" + ("" if budget is None else f"; budget {budget:g} GB"))
    if budget is not None and peak > budget * GB and session.exitstatus == 0:
        reporter.write_line(f"the run exceeded its memory budget: {peak / GB:.2f} GB > {budget:g} GB", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _share_cores_between_xdist_workers(config) -> None:
    """Under pytest-xdist each worker takes its share of the cores for torch and the native kernels: n workers that
    each start one thread per core oversubscribe the machine, and OpenMP's waiting threads then spin against each
    other (measured: the SSD300 batch-1 step took 7.8 s beside one other 2-thread process, 2.0 s alone). Results do
    not depend on the thread count."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if not hasattr(config, "workerinput") or workers < 2:
        return
    import ssd_native
    import torch

    threads = max(1, (os.cpu_count() or 1) // workers)
    torch.set_num_threads(threads)
    ssd_native.set_num_threads(threads)


def pytest_report_header(config):
    if PROFILE == "explore":
        seed = config.getoption("hypothesis_seed")
        return f"hypothesis profile: explore, seed {seed} (rerun with --hypothesis-seed={seed})"
    return f"hypothesis profile: {PROFILE} (derandomized: the same examples every run)"

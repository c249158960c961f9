"""Hypothesis profiles for every test under tests/ and parity/, loaded before any test module is imported.

`ci` (the default: make test, make sweep, make asan and the CI gate) is derandomized and keeps no example
database, so every run draws the same examples and a verdict reproduces on any machine. `explore`
(HYPOTHESIS_PROFILE=explore) draws new examples each run from a seed printed in the session header, so a failure
found there reruns with --hypothesis-seed=N. Either way a failure prints the failing example and a
@reproduce_failure blob."""

import os
import random

import pytest
from hypothesis import settings

from parity.heap import reuse_freed_memory

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, deadline=None, print_blob=True)
settings.load_profile(PROFILE)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # Runs before hypothesis's own hook reads the option, so an explore run always has a seed it can print.
    if PROFILE == "explore" and config.getoption("hypothesis_seed") is None:
        config.option.hypothesis_seed = str(random.SystemRandom().randrange(2**32))
    _share_cores_between_xdist_workers(config)
    reuse_freed_memory()


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

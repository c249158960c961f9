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

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, deadline=None, print_blob=True)
settings.load_profile(PROFILE)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # Runs before hypothesis's own hook reads the option, so an explore run always has a seed it can print.
    if PROFILE == "explore" and config.getoption("hypothesis_seed") is None:
        config.option.hypothesis_seed = str(random.SystemRandom().randrange(2**32))


def pytest_report_header(config):
    if PROFILE == "explore":
        seed = config.getoption("hypothesis_seed")
        return f"hypothesis profile: explore, seed {seed} (rerun with --hypothesis-seed={seed})"
    return f"hypothesis profile: {PROFILE} (derandomized: the same examples every run)"

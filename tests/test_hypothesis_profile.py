"""The harness's verdicts reproduce: the `ci` hypothesis profile draws the same examples every run, and an
`explore` run draws new ones from a seed it prints, which reproduces them."""

import os
import re
import subprocess
import sys
from pathlib import Path

from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
PROBE = '''
from hypothesis import given, settings, strategies as st

@settings(max_examples=5)
@given(st.integers(0, 10**9))
def test_draws(x):
    print("DRAW", x)
'''


def _draws(tmp_path, profile: str, *args: str) -> tuple[list[str], str]:
    (tmp_path / "test_probe.py").write_text(PROBE)
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text())
    run = subprocess.run([sys.executable, "-m", "pytest", "-s", "-p", "no:cacheprovider", "test_probe.py", *args],
                         cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "HYPOTHESIS_PROFILE": profile})
    assert run.returncode == 0, run.stdout + run.stderr
    return re.findall(r"DRAW (\d+)", run.stdout), run.stdout


def test_this_session_runs_the_ci_profile():
    if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci":
        assert settings.default.derandomize and settings.default.database is None


def test_ci_profile_draws_the_same_examples_every_run(tmp_path):
    first, header = _draws(tmp_path, "ci")
    assert "hypothesis profile: ci" in header
    assert len(first) == 5 and _draws(tmp_path, "ci")[0] == first


def test_explore_profile_prints_a_seed_that_reproduces_its_examples(tmp_path):
    first, header = _draws(tmp_path, "explore")
    seed = re.search(r"hypothesis profile: explore, seed (\d+) \(rerun with --hypothesis-seed=\1\)", header).group(1)
    assert _draws(tmp_path, "explore", f"--hypothesis-seed={seed}")[0] == first
    assert _draws(tmp_path, "explore", f"--hypothesis-seed={int(seed) + 1}")[0] != first

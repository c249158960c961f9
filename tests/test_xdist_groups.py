"""Under pytest-xdist, a full-SSD300 case may only be read from a test in the full-SSD300 group: two such runs side
by side exceed the machine's memory (parity/cases.py)."""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from parity import cases

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def summaries(monkeypatch):
    """case_summary with the expensive part replaced: the cases it was asked to compute."""
    computed = []
    monkeypatch.setattr(cases, "_case_summary", lambda name, batch: computed.append((name, batch)) or {})
    monkeypatch.setattr(cases, "running_xdist_group", None)
    return computed


def test_a_full_ssd300_case_from_another_group_is_refused_before_it_runs(summaries, monkeypatch):
    monkeypatch.setattr(cases, "running_xdist_group", cases.case_id("narrow", 1))
    with pytest.raises(RuntimeError, match=r"ssd300-B2.*xdist group 'narrow-B1'.*FULL_SSD300_GROUP"):
        cases.case_summary("default", 2)
    monkeypatch.setattr(cases, "running_xdist_group", "")  # a test with no group at all
    with pytest.raises(RuntimeError, match="full SSD300"):
        cases.case_summary("default", 1)
    assert summaries == []


def test_the_full_ssd300_group_narrow_cases_and_serial_runs_are_let_through(summaries, monkeypatch):
    monkeypatch.setattr(cases, "running_xdist_group", cases.FULL_SSD300_GROUP)
    cases.case_summary("default", 2)
    monkeypatch.setattr(cases, "running_xdist_group", "narrow-B1")
    cases.case_summary("narrow", 2)
    monkeypatch.setattr(cases, "running_xdist_group", None)  # not in an xdist worker
    cases.case_summary("default", 1)
    assert summaries == [("default", 2), ("narrow", 2), ("default", 1)]


GROUPED_TESTS = '''
import os
import pytest

@pytest.mark.parametrize("i", range(6))
@pytest.mark.xdist_group("one")
def test_grouped(i):
    with open(os.environ["GROUP_LOG"], "a") as log:
        log.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

@pytest.mark.parametrize("i", range(6))
def test_free(i):
    pass
'''


def test_the_installed_pytest_xdist_keeps_a_group_on_one_worker(tmp_path):
    """The grouping the sweep relies on, end to end with the installed pytest and pytest-xdist: with pytest 9.2 and
    xdist 3.8, --dist loadgroup silently scheduled like --dist load and split a group over the workers."""
    (tmp_path / "test_grouped.py").write_text(GROUPED_TESTS)
    log = tmp_path / "workers.txt"
    run = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q", "-p", "no:cacheprovider",
                          "test_grouped.py"], cwd=tmp_path, env={**os.environ, "GROUP_LOG": str(log)},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    workers = log.read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, f"xdist group 'one' ran on workers {sorted(set(workers))}"


def test_the_sweep_schedules_by_group_by_default():
    """A plain `pytest parity/ -n 2` must keep the groups: --dist loadgroup is in the project's pytest options."""
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "--dist loadgroup" in options

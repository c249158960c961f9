"""Under pytest-xdist, a full-SSD300 case may only be read from a test in the full-SSD300 group: two such runs side
by side exceed the machine's memory (parity/cases.py)."""

import pytest

from parity import cases


@pytest.fixture
def summaries(monkeypatch):
    """case_summary with the expensive part replaced: the cases it was asked to compute."""
    computed = []
    monkeypatch.setattr(cases, "_case_summary", lambda name, batch: computed.append((name, batch)) or {})
    monkeypatch.setattr(cases, "running_xdist_group", None)
    return computed


def test_a_full_ssd300_case_from_another_group_is_refused_before_it_runs(summaries, monkeypatch):
    monkeypatch.setattr(cases, "running_xdist_group", cases.case_id("narrow", 1))
    with pytest.raises(RuntimeError, match=r"ssd300-B4.*xdist group 'narrow-B1'.*FULL_SSD300_GROUP"):
        cases.case_summary("default", 4)
    monkeypatch.setattr(cases, "running_xdist_group", "")  # a test with no group at all
    with pytest.raises(RuntimeError, match="full SSD300"):
        cases.case_summary("default", 1)
    assert summaries == []


def test_the_full_ssd300_group_narrow_cases_and_serial_runs_are_let_through(summaries, monkeypatch):
    monkeypatch.setattr(cases, "running_xdist_group", cases.FULL_SSD300_GROUP)
    cases.case_summary("default", 4)
    monkeypatch.setattr(cases, "running_xdist_group", "narrow-B1")
    cases.case_summary("narrow", 2)
    monkeypatch.setattr(cases, "running_xdist_group", None)  # not in an xdist worker
    cases.case_summary("default", 1)
    assert summaries == [("default", 4), ("narrow", 2), ("default", 1)]

"""pytest plumbing for the parity sweep: every compared tensor goes into one JSON report at the end of the run,
and a run that compared nothing fails. Under pytest-xdist (`-n 2 --dist loadgroup`) each worker hands its results
to the controller, which writes the one report."""

from pathlib import Path

import pytest

from .console import wide_console
from .core.compare import TensorResult
from .core.report import DEFAULT_REPORT, build_report, print_summary, write_report

_collected = []


def pytest_addoption(parser):
    parser.addoption("--parity-report", default=str(DEFAULT_REPORT), help="where to write the JSON parity report")


class _Recorder:
    """Collects the TensorResults a test judged (a short repr: tools that print a test's arguments print this)."""

    def __call__(self, result) -> None:
        _collected.append(result)

    def __repr__(self) -> str:
        return f"record(<{len(_collected)} results so far>)"


@pytest.fixture
def record():
    """Tests hand each TensorResult they judged to this fixture, so the report holds exactly what was asserted."""
    return _Recorder()


@pytest.fixture(autouse=True)
def _tell_cases_the_xdist_group(request):
    """In a pytest-xdist worker, parity/cases.py learns which xdist group the running test is in ("" for none), so a
    full-SSD300 case read from outside that group fails at once instead of running the machine out of memory."""
    if not _is_worker(request.config):
        yield
        return
    from . import cases

    marker = request.node.get_closest_marker("xdist_group")
    cases.running_xdist_group = (marker.args[0] if marker.args else marker.kwargs.get("name", "")) if marker else ""
    yield
    cases.running_xdist_group = None


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")  # a pytest-xdist worker process


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist controller: a worker's judged results, handed over when it finishes. A worker that died (killed
    for memory, say) hands over nothing; xdist fails the test it was running and replaces it."""
    output = getattr(node, "workeroutput", None) or {}
    _collected.extend(TensorResult(**row) for row in output.get("parity_results", []))
    _compared_anywhere.append(output.get("parity_compares", False))


_compared_anywhere = []


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    compares_tensors = any("record" in getattr(item, "fixturenames", ()) for item in session.items)
    if _is_worker(config):  # the controller writes the one report
        config.workeroutput["parity_results"] = [r.to_dict() for r in _collected]
        config.workeroutput["parity_compares"] = compares_tensors
        return
    compares_tensors = compares_tensors or any(_compared_anywhere)
    if not compares_tensors or config.option.collectonly:
        return
    report = build_report(_collected)
    path = write_report(report, Path(config.getoption("--parity-report")))
    config._parity_report = (report, path)
    if not _collected and session.exitstatus == 0:
        session.exitstatus = 1  # zero tensors compared: a parity run that checked nothing is a failure


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not hasattr(config, "_parity_report"):
        return
    report, path = config._parity_report
    print_summary(report, wide_console())
    terminalreporter.write_line(f"parity report: {path}")

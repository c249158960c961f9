"""The terminal summary says which runs had no isolated replay (a model or dump that gives no stage computed alone),
so a first divergence there is not read as a stage's own error."""

from rich.console import Console

from parity.core.compare import TensorResult
from parity.core.report import build_report, print_summary


def _result(case: str, mode: str, verdict: str = "pass") -> TensorResult:
    reasons = ["beyond the bound"] if verdict == "fail" else []
    return TensorResult("conv1", "activation", case, 1, [1, 2, 3, 3], "float32", verdict, reasons, mode=mode)


def _summary(results: list) -> str:
    console = Console(record=True, width=400)
    print_summary(build_report(results), console)
    return console.export_text()


def test_a_run_without_isolated_stages_is_named():
    text = _summary([_result("replayed-B1", "propagated"), _result("replayed-B1", "isolated"),
                     _result("propagated_only-B1", "propagated", "fail")])
    assert "no isolated replay in propagated_only-B1 " in text
    assert "replayed-B1" not in text.split("no isolated replay in")[1].split("\n")[0]


def test_no_line_when_every_run_was_replayed():
    text = _summary([_result("replayed-B1", "propagated"), _result("replayed-B1", "isolated")])
    assert "no isolated replay" not in text

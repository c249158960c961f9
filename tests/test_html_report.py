"""The HTML view a person opens: verdict banner, first divergence on top, failing rows first, the propagated and
isolated runs apart, error pictures linked and the first divergence's shown."""

from models.ssd300.rules import RULES
from parity.cases import traces_for
from parity.core.compare import compare_traces
from parity.core.html_report import picture_stem
from parity.core.html_report import render, write_html
from parity.core.report import build_report


def _failing_report():
    t = traces_for("narrow", 2)
    native = {k: v.copy() for k, v in t.native.items()}
    native["backbone.conv3_1"] *= 1.01
    native["grad/backbone.conv4_2"][0, 0, 0, 0] = float("nan")
    results = compare_traces(RULES, "narrow-B2", 2, native, t.reference, t.oracle)
    isolated = compare_traces(RULES, "narrow-B2", 2, t.native, t.reference, t.oracle)[:3]
    for r in isolated:
        r.mode = "isolated"
    return build_report(results + isolated)


def test_failing_report_shows_verdict_first_divergence_and_both_modes():
    page = render(_failing_report())
    assert "FAIL: 166 tensors compared" in page and "3 stages compared in isolation, 0 failed" in page
    assert "First divergence: <code>backbone.conv3_1</code>" in page
    assert "native backward: first non-finite at grad/backbone.conv4_2" in page
    propagated, isolated = page.split("<h3>propagated")[1].split("<h3>isolated")
    assert propagated.index("<tr class='fail'>") < propagated.index("<tr class='pass'>")  # failures first
    assert "(0 of 3 failed)" in isolated and "<tr class='fail'>" not in isolated
    assert "<img" not in page  # no pictures were written


def test_pictures_are_linked_where_they_exist(tmp_path):
    (tmp_path / "diff").mkdir()
    stem = picture_stem("backbone.conv3_1", "narrow-B2")
    (tmp_path / "diff" / f"{stem}-heatmap.png").write_bytes(b"png")
    page = write_html(_failing_report(), tmp_path / "report.html").read_text()
    assert f"<img class='first' src='diff/{stem}-heatmap.png'" in page
    assert f"<a href='diff/{stem}-heatmap.png'>heatmap</a>" in page
    assert "histogram.png" not in page

"""The HTML view of a JSON report: first divergence on top, one row per tensor, coloured by verdict."""

import html
import json
from pathlib import Path

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: #eee; }
tr.pass td.verdict { background: #d6f5d6; } tr.fail td.verdict { background: #f8c9c9; font-weight: bold; }
tr.fail { background: #fff3f3; }
.banner { padding: 0.6em 1em; border-radius: 4px; margin-bottom: 1em; }
.banner.pass { background: #d6f5d6; } .banner.fail { background: #f8c9c9; }
code { font-size: 0.95em; }
"""


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return html.escape(str(value))


def _run_table(report: dict) -> str:
    rows = []
    for run in report["runs"]:
        first = run["first_divergence"]
        divergence = f"<b>{html.escape(first['name'])}</b>: {html.escape(first['reasons'][0])}" if first else "-"
        isolated = run.get("isolated", {})
        first_isolated = isolated.get("first_divergence")
        verdict = "fail" if run["failed"] or isolated.get("failed") else "pass"
        rows.append(
            f"<tr class='{verdict}'><td><a href='#{html.escape(run['case'])}'>{html.escape(run['case'])}</a></td>"
            f"<td>{run['compared']}</td><td class='verdict'>{run['failed']}</td>"
            f"<td>{sum(run.get('ties', {}).values())}</td><td>{divergence}</td>"
            f"<td>{isolated.get('failed', 0)} of {isolated.get('compared', 0)}"
            f"{': ' + html.escape(first_isolated['name']) if first_isolated else ''}</td></tr>"
        )
    return ("<table><tr><th>case</th><th>compared</th><th>failed</th><th>ties</th><th>first divergence</th>"
            "<th>isolated: failed, first</th></tr>" + "".join(rows) + "</table>")


def _tensor_row(t: dict) -> str:
    worst = t["worst"][0] if t["worst"] else None
    where = " ".join(f"{k}={v}" for k, v in worst["meaning"].items()) if worst else ""
    ratio = t["oracle"].get("ratio") if t["oracle"] else None
    reasons = "<br>".join(html.escape(r) for r in t["reasons"])
    cells = [
        f"<code>{html.escape(t['name'])}</code>" + (" (isolated)" if t.get("mode") == "isolated" else ""),
        t["kind"], _fmt(tuple(t["shape"])),
        _fmt(t["metrics"].get("max_abs")), _fmt(t["metrics"].get("max_rel")), _fmt(t["metrics"].get("nmse")),
        _fmt(t["oracle"].get("native_error") if t["oracle"] else None), _fmt(ratio),
        _fmt(t["bound"].get("value")), _fmt(t["mismatches"]), _fmt(t["ties"]), html.escape(where),
    ]
    body = "".join(f"<td>{c}</td>" for c in cells)
    return f"<tr class='{t['verdict']}'>{body}<td class='verdict'>{t['verdict']}</td><td>{reasons}</td></tr>"


HEADER = ("<tr><th>tensor</th><th>kind</th><th>shape</th><th>max abs</th><th>max rel</th><th>NMSE</th>"
          "<th>native err vs f64</th><th>ratio to ref err</th><th>bound</th><th>beyond</th><th>ties</th>"
          "<th>worst element</th><th>verdict</th><th>why</th></tr>")


def render(report: dict) -> str:
    verdict = "pass" if report["passed"] else "fail"
    total = sum(r["compared"] for r in report["runs"])
    failed = sum(r["failed"] for r in report["runs"])
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>ssd-parity report</title><style>{STYLE}</style>"
        "</head><body><h1>ssd-parity: native vs reference</h1>",
        f"<div class='banner {verdict}'>{verdict.upper()}: {total} tensors compared, {failed} failed "
        f"(report created {html.escape(report['created'])})</div>",
        _run_table(report),
    ]
    for run in report["runs"]:
        rows = [t for t in report["tensors"] if t["case"] == run["case"]]
        rows.sort(key=lambda t: t["verdict"] == "pass")  # failures first, each group in execution order
        parts.append(f"<h2 id='{html.escape(run['case'])}'>{html.escape(run['case'])}</h2>")
        parts.append("<table>" + HEADER + "".join(_tensor_row(t) for t in rows) + "</table>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(report: dict, path: Path) -> Path:
    path = Path(path)
    path.write_text(render(report))
    return path


if __name__ == "__main__":
    import sys

    source = Path(sys.argv[1] if len(sys.argv) > 1 else "reports/parity-report.json")
    print(write_html(json.loads(source.read_text()), source.with_suffix(".html")))

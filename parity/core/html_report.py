"""The HTML view of a JSON report: first divergence on top, one row per tensor, coloured by verdict, the
propagated and the isolated run of each case in separate tables, error pictures linked (and the first
divergence's shown) where `make diff` or `python -m parity run` wrote them under diff/ beside the report."""

import html
import json
from pathlib import Path

from .report import nonfinite_lines, shown

PICTURE_DIR = "diff"

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
.sentinel { color: #a00; }
code { font-size: 0.95em; }
img.first { max-width: 900px; border: 1px solid #ccc; margin: 0.5em 0; }
"""


def picture_stem(name: str, case: str) -> str:
    """File name prefix of one tensor's pictures; the HTML report links pictures found under it."""
    return f"{name.replace('/', '_')}-{case}"


def _pictures(name: str, case: str, base: Path | None) -> list:
    """(label, relative path) of the pictures that exist for one tensor."""
    if base is None:
        return []
    stem = picture_stem(name, case)
    found = []
    for label in ("heatmap", "histogram"):
        relative = f"{PICTURE_DIR}/{stem}-{label}.png"
        if (base / relative).exists():
            found.append((label, relative))
    return found


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
        divergence = f"<b>{html.escape(shown(first))}</b>: {html.escape(first['reasons'][0])}" if first else "-"
        isolated = run.get("isolated", {})
        first_isolated = isolated.get("first_divergence")
        verdict = "fail" if run["failed"] or isolated.get("failed") else "pass"
        rows.append(
            f"<tr class='{verdict}'><td><a href='#{html.escape(run['case'])}'>{html.escape(run['case'])}</a></td>"
            f"<td>{run['compared']}</td><td class='verdict'>{run['failed']}</td>"
            f"<td>{sum(run.get('ties', {}).values())}</td><td>{divergence}</td>"
            f"<td>{isolated.get('failed', 0)} of {isolated.get('compared', 0)}"
            f"{': ' + html.escape(shown(first_isolated)) if first_isolated else ''}</td></tr>"
        )
    return ("<table><tr><th>case</th><th>compared</th><th>failed</th><th>ties</th><th>first divergence</th>"
            "<th>isolated: failed, first</th></tr>" + "".join(rows) + "</table>")


def _tensor_row(t: dict, base: Path | None) -> str:
    worst = t["worst"][0] if t["worst"] else None
    where = " ".join(f"{k}={v}" for k, v in worst["meaning"].items()) if worst else ""
    margin = t["bound"].get("native_margin")
    # The error model's margins (largest error / bound, native and reference); the older rule's error ratio else.
    room = (f"{_fmt(margin)} / {_fmt(t['bound'].get('reference_margin'))}" if margin is not None
            else _fmt(t["oracle"].get("ratio") if t["oracle"] else None))
    reasons = "<br>".join(html.escape(r) for r in t["reasons"])
    links = " ".join(f"<a href='{html.escape(path)}'>{label}</a>" for label, path in _pictures(t["name"], t["case"], base))
    cells = [
        f"<code>{html.escape(t['name'])}</code>" + (f" (port: <code>{html.escape(t['port_name'])}</code>)"
                                                       if t.get("port_name") else "")
        + (f"<br>{links}" if links else ""),
        t["kind"], _fmt(tuple(t["shape"])),
        _fmt(t["metrics"].get("max_abs")), _fmt(t["metrics"].get("max_rel")), _fmt(t["metrics"].get("nmse")),
        _fmt(t["oracle"].get("native_error") if t["oracle"] else None), room,
        _fmt(t["bound"].get("value")), _fmt(t["mismatches"]), _fmt(t["ties"]), html.escape(where),
    ]
    body = "".join(f"<td>{c}</td>" for c in cells)
    return f"<tr class='{t['verdict']}'>{body}<td class='verdict'>{t['verdict']}</td><td>{reasons}</td></tr>"


HEADER = ("<tr><th>tensor</th><th>kind</th><th>shape</th><th>max abs</th><th>max rel</th><th>NMSE</th>"
          "<th>native err vs f64</th><th>margin: err / bound (native / ref)</th><th>largest bound</th><th>beyond</th><th>ties</th>"
          "<th>worst element</th><th>verdict</th><th>why</th></tr>")


def _sentinel(run: dict) -> str:
    return "".join(f"<p class='sentinel'>{html.escape(line)}</p>" for line in nonfinite_lines(run))


def _case_section(report: dict, run: dict, base: Path | None) -> str:
    case = run["case"]
    parts = [f"<h2 id='{html.escape(case)}'>{html.escape(case)}</h2>", _sentinel(run)]
    if run.get("not_provided"):
        names = ", ".join(f"<code>{html.escape(n)}</code>" for n in run["not_provided"])
        parts.append(f"<p class='not-provided'>Compared {run['compared']} of the {run['known']} tensors the harness "
                     f"has; not provided by the dump ({len(run['not_provided'])}): {names}</p>")
    first = run["first_divergence"]
    if first:
        parts.append(f"<p>First divergence: <code>{html.escape(shown(first))}</code></p>")
        parts += [f"<img class='first' src='{html.escape(path)}' alt='{label} of {html.escape(first['name'])}'>"
                  for label, path in _pictures(first["name"], case, base)]
    for mode, title in (("propagated", "propagated: the native run on its own inputs"),
                        ("isolated", "isolated: each stage fed the reference's inputs")):
        rows = [t for t in report["tensors"] if t["case"] == case and t.get("mode", "propagated") == mode]
        if not rows:
            continue
        rows.sort(key=lambda t: t["verdict"] == "pass")  # failures first, each group in execution order
        failed = sum(t["verdict"] != "pass" for t in rows)
        parts.append(f"<h3>{title} ({failed} of {len(rows)} failed)</h3>")
        parts.append("<table>" + HEADER + "".join(_tensor_row(t, base) for t in rows) + "</table>")
    return "".join(parts)


def render(report: dict, base: Path | None = None) -> str:
    """base: the report's directory, where pictures are looked up (None: no pictures)."""
    verdict = "pass" if report["passed"] else "fail"
    runs = report["runs"]
    total, failed = sum(r["compared"] for r in runs), sum(r["failed"] for r in runs)
    isolated = sum(r.get("isolated", {}).get("compared", 0) for r in runs)
    isolated_failed = sum(r.get("isolated", {}).get("failed", 0) for r in runs)
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>ssd-parity report</title><style>{STYLE}</style>"
        "</head><body><h1>ssd-parity: native vs reference</h1>",
        f"<div class='banner {verdict}'>{verdict.upper()}: {total} tensors compared, {failed} failed; {isolated} "
        f"stages compared in isolation, {isolated_failed} failed (report created {html.escape(report['created'])})</div>",
        _run_table(report),
    ]
    parts += [_case_section(report, run, base) for run in runs]
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(report: dict, path: Path) -> Path:
    path = Path(path)
    path.write_text(render(report, path.parent))
    return path


if __name__ == "__main__":
    import sys

    source = Path(sys.argv[1] if len(sys.argv) > 1 else "reports/parity-report.json")
    print(write_html(json.loads(source.read_text()), source.with_suffix(".html")))

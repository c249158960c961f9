"""The JSON report (the source of truth) and its terminal view.

Schema (version 1):
  {"schema": 1, "created": ISO time, "passed": bool,
   "margins": {kind: {"tensors", "native": [min, median, max], "reference": [min, median, max]}},
   "runs": [{"case", "batch_size", "compared", "failed", "known", "not_provided": [tensor], "assumed_missing",
             "harness_errors", "ties": {tensor: count},
             "isolated": {"compared", "failed", "first_divergence"},  # each stage fed the reference's inputs
             "nonfinite": {side: {"forward"|"backward": {"name", "counts", "other_side_finite"} | null}},
             "first_divergence": {"name", "reasons"} | null}],
   "tensors": [TensorResult.to_dict(), ...]}
A run that compared zero tensors fails.
"""

import json
import datetime
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .compare import shown_name

SCHEMA_VERSION = 1
DEFAULT_REPORT = Path("reports") / "parity-report.json"


def _is_backward(name: str) -> bool:
    return name.startswith(("grad/", "param_grad/"))


def first_nonfinite(rows: list) -> dict:
    """The NaN/Inf sentinel: per side, forward (with loss) and backward, the first tensor in execution order
    holding a NaN or Inf, its counts, and whether the other side is finite there."""
    sentinel = {}
    for side, other in (("native", "reference"), ("reference", "native")):
        sentinel[side] = {}
        for phase in ("forward", "backward"):
            hit = next((r for r in rows if r.nonfinite and (phase == "backward") == _is_backward(r.name)
                        and any(r.nonfinite[side].values())), None)
            sentinel[side][phase] = None if hit is None else {
                "name": hit.name,
                "counts": hit.nonfinite[side],
                "other_side_finite": not any(hit.nonfinite[other].values()),
            }
    return sentinel


def nonfinite_lines(run: dict) -> list:
    """The sentinel of one run in words: 'native backward: first non-finite at NAME {counts} (other side finite)'."""
    lines = []
    for side, phases in run.get("nonfinite", {}).items():
        for phase, hit in phases.items():
            if hit:
                other = "finite" if hit["other_side_finite"] else "also non-finite"
                lines.append(f"{side} {phase}: first non-finite at {hit['name']} {hit['counts']} (other side {other})")
    return lines


def _divergence(result) -> dict | None:
    if result is None:
        return None
    entry = {"name": result.name, "reasons": result.reasons}
    return {**entry, "port_name": result.port_name} if result.port_name else entry


def shown(entry: dict) -> str:
    """A report entry's tensor name as printed (compare.shown_name)."""
    return shown_name(entry["name"], entry.get("port_name"))


def summarize_runs(results: list, not_provided: dict | None = None) -> list:
    """not_provided: case -> the tensors a dump did not contain (parity/partial.py), listed per run."""
    not_provided = not_provided or {}
    by_case = defaultdict(list)
    for r in results:
        by_case[r.case].append(r)
    runs = []
    for case, all_rows in by_case.items():
        rows = [r for r in all_rows if r.mode == "propagated"]
        isolated = [r for r in all_rows if r.mode == "isolated"]
        failed = [r for r in rows if not r.passed]
        first = failed[0] if failed else None  # rows are in execution order
        first_isolated = next((r for r in isolated if not r.passed), None)
        runs.append(
            {
                "case": case,
                "batch_size": all_rows[0].batch_size,
                "compared": len(rows),
                "failed": len(failed),
                "known": len(rows) + len(not_provided.get(case, [])),  # every tensor the harness has for this run
                "not_provided": not_provided.get(case, []),
                "assumed_missing": sum(bool(r.bound.get("assumed_missing")) for r in rows),
                "harness_errors": sum(r.harness_error for r in all_rows),
                "ties": {r.name: r.ties for r in rows if r.ties},
                "nonfinite": first_nonfinite(rows),
                "first_divergence": _divergence(first),
                "isolated": {
                    "compared": len(isolated),
                    "failed": sum(not r.passed for r in isolated),
                    "first_divergence": _divergence(first_isolated),
                },
            }
        )
    return runs


def build_report(results: list, not_provided: dict | None = None) -> dict:
    runs = summarize_runs(results, not_provided)
    return {
        "schema": SCHEMA_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "passed": bool(results) and all(r["failed"] == 0 and r["isolated"]["failed"] == 0
                                        and r["compared"] + r["isolated"]["compared"] > 0 for r in runs),
        "margins": margin_distribution(results),
        "runs": runs,
        "tensors": [r.to_dict() for r in results],
    }


def margin_distribution(results: list) -> dict:
    """Per tensor kind, the spread of the error model's margins (largest error / bound) over the propagated
    tensors, native and reference, of the typical-error verdict's over the isolated convolutions (RMS error / its
    limit) and of their exact probes (differences in roundings, 0 for a correct side): how much room a bug has
    before it is seen (1 is the bound)."""
    margins = defaultdict(lambda: {"native": [], "reference": []})
    for r in results:
        if r.mode == "propagated" and r.bound.get("rule") == "error_model":
            margins[r.kind]["native"].append(r.bound["native_margin"])
            margins[r.kind]["reference"].append(r.bound["reference_margin"])
        if r.typical:  # the typical-error verdict's: RMS error / its limit
            margins["typical error (isolated)"]["native"].append(r.typical["native"]["margin"])
            margins["typical error (isolated)"]["reference"].append(r.typical["reference"]["margin"])
        if r.probe:  # the exact probe's: largest difference in roundings (a correct side reads 0)
            margins["exact probe (isolated)"]["native"].append(r.probe["native"]["units"])
            margins["exact probe (isolated)"]["reference"].append(r.probe["reference"]["units"])

    def spread(values):
        values = sorted(values)
        return [values[0], values[len(values) // 2], values[-1]]

    return {kind: {"tensors": len(m["native"]), "native": spread(m["native"]), "reference": spread(m["reference"])}
            for kind, m in margins.items()}


def write_report(report: dict, path: Path = DEFAULT_REPORT) -> Path:
    """The JSON report, and its HTML view beside it (same name, .html)."""
    from .html_report import write_html

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, allow_nan=True))
    write_html(report, path.with_suffix(".html"))
    return path


def _print_margins(margins: dict, console) -> None:
    if not margins:
        return
    table = Table(title="margins: largest error / bound per tensor (min, median, max; 1 is the bound)",
                  title_justify="left")
    for column in ("kind", "tensors", "native", "reference"):
        table.add_column(column)
    for kind, m in margins.items():
        table.add_row(kind, str(m["tensors"]), ", ".join(f"{v:.2g}" for v in m["native"]),
                      ", ".join(f"{v:.2g}" for v in m["reference"]))
    console.print(table)


def print_summary(report: dict, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="ssd-parity: native vs reference", title_justify="left")
    for column in ("case", "compared", "failed", "ties", "first divergence", "isolated: failed, first"):
        table.add_column(column)
    for run in report["runs"]:
        first, iso = run["first_divergence"], run["isolated"]
        table.add_row(
            run["case"],
            str(run["compared"]),
            f"[red]{run['failed']}[/red]" if run["failed"] else "[green]0[/green]",
            str(sum(run.get("ties", {}).values())),
            f"[red]{shown(first)}[/red]: {first['reasons'][0]}" if first else "-",
            "-" if not iso["compared"] else (f"[red]{iso['failed']}, {shown(iso['first_divergence'])}[/red]"
                                              if iso["failed"] else f"0 of {iso['compared']}"),
        )
    console.print(table)
    for run in report["runs"]:
        for line in nonfinite_lines(run):
            console.print(f"[red]{run['case']}: {line}[/red]")
        if run.get("not_provided"):
            console.print(f"[yellow]{run['case']}: compared {run['compared']} of the {run['known']} tensors the "
                          f"harness has; not provided ({len(run['not_provided'])}): "
                          f"{', '.join(run['not_provided'])}[/yellow]")
            if run.get("assumed_missing"):
                console.print(f"[yellow]{run['case']}: {run['assumed_missing']} compared tensors are computed from "
                              f"tensors not provided, which their bounds assume as far off as a correct port may "
                              f"be: sound, but loose (see their margins)[/yellow]")
    without_replay = [run["case"] for run in report["runs"] if not run["isolated"]["compared"]]
    if without_replay:
        console.print(f"[yellow]no isolated replay in {', '.join(without_replay)} (the port or dump gives no stage "
                      f"computed alone): a first divergence there is where the error was seen first, not told "
                      f"apart from what that stage inherited[/yellow]")
    if not report["runs"]:
        console.print("[red]no tensors were compared[/red]")
    _print_margins(report.get("margins", {}), console)
    harness_errors = sum(r.get("harness_errors", 0) for r in report["runs"])
    if harness_errors:
        console.print(f"[red]{harness_errors} harness errors: the reference's own float32 broke a bound (a wrong "
                      f"bound, not a port failure; see the tensors' reasons)[/red]")
    verdict = "[green]PASS[/green]" if report["passed"] else "[red]FAIL[/red]"
    runs = report["runs"]
    console.print(f"{verdict}: {sum(r['compared'] for r in runs)} tensors compared, "
                  f"{sum(r['failed'] for r in runs)} failed; {sum(r['isolated']['compared'] for r in runs)} "
                  f"stages compared in isolation, {sum(r['isolated']['failed'] for r in runs)} failed")

"""The training-trajectory report: JSON (the source of truth), a terminal summary and two pictures beside it
(loss curves of every side; per-step parameter drift)."""

import datetime
import json
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from .train import TrajectoryReport

DEFAULT_TRAIN_REPORT = Path("reports") / "train-parity.json"
WHEN = {
    "train_loss": "loss.total on the step's batch, before that step's update",
    "validation_loss": "mean loss.total over the validation items, no gradient, before any update and after the "
                       "update that ends each epoch (every forward and loss tap of each batch judged)",
    "parameters": "every parameter and momentum buffer right after the step's update",
}


def _epoch_means(report: TrajectoryReport, side: str) -> list:
    epochs = sorted({s.epoch for s in report.steps})
    return [float(np.mean([s.train_loss[side] for s in report.steps if s.epoch == e])) for e in epochs]


def learning_check(report: TrajectoryReport) -> dict:
    """Does each side learn? Validation loss after the last update below the one before the first; train loss of
    the last epoch below the first epoch's (each a mean over its steps); every parameter moved; nothing
    non-finite."""
    sides = ("native", "reference")
    first_val, last_val = report.validation[0]["loss"], report.validation[-1]["loss"]
    check = {"validation_before": {s: first_val[s] for s in sides}, "validation_after": {s: last_val[s] for s in sides},
             "train_first_epoch_mean": {s: _epoch_means(report, s)[0] for s in sides},
             "train_last_epoch_mean": {s: _epoch_means(report, s)[-1] for s in sides}}
    check["validation_drop"] = {s: 1.0 - last_val[s] / first_val[s] for s in sides}
    check["unchanged_parameters"] = {s: [k for k, moved in report.initial_parameters_changed[s].items() if not moved]
                                     for s in sides}
    check["nonfinite"] = any(not np.isfinite(v) for step in report.steps for v in step.train_loss.values())
    # The train loss's trend compares two epochs' means: a run within one epoch cannot judge it, and says so.
    one_epoch = len({s.epoch for s in report.steps}) < 2
    check["not_judged"] = ["train loss trend (needs two epochs)"] if one_epoch else []
    check["learns"] = (all(last_val[s] < first_val[s] for s in sides)
                       and (one_epoch
                            or all(check["train_last_epoch_mean"][s] < check["train_first_epoch_mean"][s] for s in sides))
                       and not any(check["unchanged_parameters"].values()) and not check["nonfinite"])
    return check


def build_train_report(report: TrajectoryReport, require_learning: bool = True) -> dict:
    steps = []
    first = None
    for record in report.steps:
        failed = [r for r in record.results if not r.passed]
        if failed and first is None:
            first = {"step": record.step, "name": failed[0].name, "reasons": failed[0].reasons}
        steps.append({"step": record.step, "epoch": record.epoch, "batch": record.batch,
                      "train_loss": record.train_loss, "ties": record.ties, "drift": record.drift,
                      "compared": len(record.results), "failed": len(failed),
                      "results": [r.to_dict() for r in record.results]})
    validation_failed = [v for v in report.validation if v["verdict"] != "pass"]
    learning = learning_check(report) if len(report.validation) > 1 else None
    passed = (first is None and not validation_failed and bool(steps)
              and (not require_learning or bool(learning and learning["learns"])))
    return {"schema": 1, "kind": "training-trajectory", "passed": passed,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "settings": report.settings, "when": WHEN, "first_divergence": first,
            "learning_required": require_learning, "learning": learning, "validation": report.validation,
            "steps": steps}


def save_pictures(data: dict, stem: Path) -> list:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s["step"] for s in data["steps"]]
    written = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for side, colour, width in (("oracle", "#999999", 4.0), ("reference", "#1f77b4", 2.0), ("native", "#d62728", 1.0)):
        ax.plot(steps, [s["train_loss"][side] for s in data["steps"]], "-", color=colour, linewidth=width,
                label=f"{side}: train (before update)")
        ax.plot([v["after_step"] for v in data["validation"]], [v["loss"][side] for v in data["validation"]],
                "--", color=colour, linewidth=width, marker="o", label=f"{side}: validation (after update)")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss.total")
    ax.legend(fontsize=7)
    ax.set_title("training-trajectory parity: loss per step")
    written.append(_save(plt, fig, stem.with_name(stem.name + "-loss.png")))
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (("native_vs_reference", "native vs reference (float32)"),
                       ("reference_vs_oracle", "reference float32 vs float64 oracle")):
        ax.plot(steps, [max(s["drift"][key], 1e-30) for s in data["steps"]], marker=".", label=label)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("largest relative parameter difference")
    ax.legend(fontsize=8)
    ax.set_title("parameter drift after each update")
    written.append(_save(plt, fig, stem.with_name(stem.name + "-drift.png")))
    return [str(p) for p in written]


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_train_report(data: dict, path: Path = DEFAULT_TRAIN_REPORT) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data["pictures"] = save_pictures(data, path.with_suffix(""))
    path.write_text(json.dumps(data, indent=1, allow_nan=True))
    return path


def print_train_summary(data: dict, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="training-trajectory parity (loss before each update; parameters after it)",
                  title_justify="left")
    for column in ("step", "epoch", "native loss", "reference loss", "oracle loss", "compared", "failed",
                   "drift native/ref", "drift ref/oracle", "ties"):
        table.add_column(column)
    for s in data["steps"]:
        loss = s["train_loss"]
        table.add_row(str(s["step"]), str(s["epoch"]), f"{loss['native']:.6g}", f"{loss['reference']:.6g}",
                      f"{loss['oracle']:.6g}", str(s["compared"]),
                      f"[red]{s['failed']}[/red]" if s["failed"] else "0", f"{s['drift']['native_vs_reference']:.2g}",
                      f"{s['drift']['reference_vs_oracle']:.2g}", str(sum(s["ties"].values())))
    console.print(table)
    for v in data["validation"]:
        verdict = (f"[green]pass[/green] ({v['compared']} tensors)" if v["verdict"] == "pass"
                   else f"[red]fail[/red] ({v['failed']} of {v['compared']} tensors)")
        console.print(f"validation {v['when']}: native {v['loss']['native']:.6g}, reference "
                      f"{v['loss']['reference']:.6g}, oracle {v['loss']['oracle']:.6g} {verdict}")
    first = data["first_divergence"]
    if first:
        console.print(f"[red]first divergence: step {first['step']}, {first['name']}[/red]: {first['reasons'][0]}")
    learning = data["learning"]
    if learning:
        drops = ", ".join(f"{side} {100 * d:.1f}%" for side, d in learning["validation_drop"].items())
        console.print(f"learning: validation loss fell by {drops}; train loss (epoch means) "
                      f"{learning['train_first_epoch_mean']['native']:.4g} -> "
                      f"{learning['train_last_epoch_mean']['native']:.4g} (native); unchanged parameters: "
                      f"{learning['unchanged_parameters']}; {'learns' if learning['learns'] else '[red]does not learn[/red]'}")
        for criterion in learning.get("not_judged", []):
            console.print(f"not judged with these steps: {criterion}")
    verdict = "[green]PASS[/green]" if data["passed"] else "[red]FAIL[/red]"
    compared = sum(s["compared"] for s in data["steps"])
    console.print(f"{verdict}: {len(data['steps'])} steps, {compared} tensors compared, "
                  f"{sum(s['failed'] for s in data['steps'])} failed")

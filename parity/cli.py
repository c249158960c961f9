"""Command line: `python -m parity run` (one scenario, every tensor), `diff LAYER` (one tensor explained),
`compare --native-dump DIR` (a port's dump against the reference), `dump` (this project's module as a dump) and
`faults` (the fault catalogue, each bug switched on: detected and localized?) and `bench` (native against
PyTorch: speed, memory, scaling and the harness's own cost)."""

import argparse
import math
import sys
from pathlib import Path

from rich.markup import escape

from models.ssd300.scenarios import DEFAULT_SCENARIO

from .console import wide_console
from .core.heap import reuse_freed_memory
from .core.report import DEFAULT_REPORT, build_report, print_summary, write_report


def _batch_sizes(text: str | None) -> list | None:
    if not text:
        return None
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"batch sizes must be comma-separated integers, got {text!r}") from None
    if any(b < 1 for b in sizes):
        raise argparse.ArgumentTypeError(f"batch sizes must be >= 1, got {text!r}")
    return sizes


def _report(results: list, path: Path, console, not_provided: dict | None = None) -> int:
    """Write the JSON (and HTML) report, print its summary; exit status 0 only if everything passed."""
    report = build_report(results, not_provided)
    write_report(report, path)
    print_summary(report, console)
    console.print(f"report: {path}")
    return 0 if report["passed"] else 1


def _picture_first_divergence(traces, results: list, directory: Path) -> None:
    """Error pictures of the first failing tensor of a case, where the HTML report links them."""
    from .diff_plots import error_array, save_pictures

    first = next((r for r in results if not r.passed and r.name in traces.native and r.name in traces.oracle), None)
    if first is not None and traces.native[first.name].shape == traces.oracle[first.name].shape:
        yardstick = traces.reference if first.kind in ("index", "exact") else traces.oracle
        save_pictures(first.name, first.case, error_array(traces.native[first.name], yardstick[first.name]),
                      first.bound.get("value"), directory)


def _packaged_models() -> list:
    """The models with a package under models/: its __init__ gives load_scenarios and run_case."""
    root = Path(__file__).resolve().parent.parent / "models"
    return sorted(p.name for p in root.iterdir() if (p / "__init__.py").exists())


def _case_runner(args):
    """-> (scenarios, run one case) of the model asked for, the case drawing its first divergence's pictures."""
    import importlib

    model = importlib.import_module(f"models.{args.model}")
    pictures = lambda traces, propagated: _picture_first_divergence(traces, propagated, Path(args.report).parent / "diff")
    return model.load_scenarios(args.scenario, args.batch_sizes), lambda scenario: model.run_case(scenario, pictures)


def cmd_run(args) -> int:
    console = wide_console()
    results = []
    scenarios, run_case = _case_runner(args)
    for number, scenario in enumerate(scenarios, 1):
        with console.status(f"[{number}/{len(scenarios)}] running {scenario.id} on every side"):
            case = run_case(scenario)
        propagated = [r for r in case if r.mode == "propagated"]
        results += case
        console.print(f"[{number}/{len(scenarios)}] {scenario.id}: {sum(not r.passed for r in propagated)} of "
                      f"{len(propagated)} tensors failed")
    return _report(results, Path(args.report), console)


def cmd_compare(args) -> int:
    """A dump from any port (parity/dump.py) against the reference on the dump's scenario."""
    from models.ssd300.case import compare_sides
    from models.ssd300.isolated import isolated_results
    from models.ssd300.reference.step import step_order
    from models.ssd300.sides import reference_model_for, run_sides

    from .dump import load_dump_case
    from .dump_manifest import ISOLATED
    from .partial import group_of, split_not_provided
    from .stage_files import DumpedStages, reference_for_stages, split_isolated

    console = wide_console()
    scenario, dump, port_names = load_dump_case(Path(args.native_dump))
    native, isolated = split_isolated(dump)
    step = any(group_of(name) != "forward" for name in native) or bool(isolated)
    with console.status(f"running the reference on {scenario.id}"):
        results = compare_sides(run_sides(scenario, step=step, native=native))
    known = step_order(reference_model_for(scenario))
    results, not_provided = split_not_provided(results, set(native), known, args.require)
    if isolated:  # a port's stages on the stage inputs (python -m parity stage-inputs): the isolated verdicts
        with console.status(f"judging the dump's isolated stages on {scenario.id}"):
            reference = reference_for_stages(scenario)
            compare_sides(reference)  # the reference's own bounds, which the isolated stages are held to
            results += isolated_results(reference, DumpedStages(isolated))
    for result in results:
        isolated_name = ISOLATED + result.name if result.mode == "isolated" else result.name
        result.port_name = port_names.get(isolated_name, port_names.get(result.name, ""))
    return _report(results, Path(args.report), console, {scenario.id: not_provided})


def cmd_dump(args) -> int:
    """Write the project's own native module's trace in the dump format (what a C port would write)."""
    from models.ssd300.scenarios import load_scenarios
    from models.ssd300.sides import native_step

    from .dump import write_dump
    from .dump_inputs import checksums, scenario_inputs

    scenario = load_scenarios(args.scenario, [args.batch_size])[0]
    images = scenario.images()
    trace = native_step(scenario, images, scenario.targets())
    print(write_dump(Path(args.out), args.scenario, args.batch_size, trace, checksums(scenario_inputs(scenario))))
    return 0


def cmd_stage_inputs(args) -> int:
    """The reference's inputs to every stage of the isolated replay, for a port to compute them from files."""
    from models.ssd300.scenarios import load_scenarios

    from .stage_files import write_stage_inputs

    print(write_stage_inputs(Path(args.out), load_scenarios(args.scenario, [args.batch_size])[0]))
    return 0


def cmd_inputs(args) -> int:
    """Everything a port needs to compute a scenario's step, in the dump format (parity/dump_inputs.py)."""
    from models.ssd300.scenarios import load_scenarios

    from .dump_inputs import write_inputs

    print(write_inputs(Path(args.out), load_scenarios(args.scenario, [args.batch_size])[0]))
    return 0


def cmd_faults(args) -> int:
    """Every catalogued fault switched on in turn: detected? localized to the tensor where it starts?"""
    from rich.table import Table

    from models.ssd300.faults import CATALOGUE, LADDER_MARGIN, check_fault

    console = wide_console()
    chosen = [f for f in CATALOGUE if not args.only or f.name in args.only]
    unknown = set(args.only or ()) - {f.name for f in CATALOGUE}
    if unknown:
        raise ValueError(f"unknown fault(s) {sorted(unknown)}; known: {', '.join(f.name for f in CATALOGUE)}")
    table = Table(title="fault catalogue: each bug on, the parity run's verdict", title_justify="left")
    for column in ("fault", "what it does", "scenario", "starts at", "detected", "first divergence (propagated / "
                   "isolated)", "sentinel", "localized", "float32 margin (native / reference)",
                   "float64 build margin", "typical-error margin (isolated)", "exact probe (isolated, roundings)"):
        table.add_column(column, overflow="fold")  # tensor names are shown whole
    as_expected = True
    for number, fault in enumerate(chosen, 1):
        with console.status(f"[{number}/{len(chosen)}] {fault.name} on {fault.scenario}-B{fault.batch_size}"):
            outcome = check_fault(fault)
        sentinel = f"{fault.nonfinite}: {outcome.first_nonfinite}" if fault.nonfinite else "-"
        margin = ("non-finite, the reference finite" if outcome.strongest_margin == math.inf
                  else "exact" if outcome.margin is None
                  else f"{outcome.margin:.3g}" if outcome.reference_margin is None
                  else f"{outcome.margin:.3g} / {outcome.reference_margin:.3g}")
        margin64 = "-" if outcome.float64_margin is None else f"{outcome.float64_margin:.3g}"
        typical = "-" if outcome.typical_margin is None else f"{outcome.typical_margin:.3g}"
        probed = "-" if outcome.probe_margin is None else f"{outcome.probe_margin:.3g}"
        if fault.within_model:  # must pass: no detection expected
            as_expected &= not outcome.detected
            detected = "[red]yes[/red]" if outcome.detected else "[green]no (inside the error model)[/green]"
            localized = "-"
        else:
            strong = outcome.strongest_margin is None or outcome.strongest_margin >= LADDER_MARGIN
            as_expected &= outcome.detected and outcome.localized and strong
            detected = ("[green]yes[/green]" if outcome.detected and strong
                        else f"[red]yes, margin < {LADDER_MARGIN:g}[/red]" if outcome.detected else "[red]no[/red]")
            localized = "[green]yes[/green]" if outcome.localized else "[red]no[/red]"
        table.add_row(fault.name, fault.does, f"{fault.scenario} B{fault.batch_size}", fault.starts_at, detected,
                      f"{outcome.first_divergence} / {outcome.first_isolated or '-'}", sentinel, localized, margin,
                      margin64, typical, probed)
    console.print(table)
    return 0 if as_expected else 1


def cmd_train(args) -> int:
    """Training-trajectory parity: both sides train from the same weights on the same batches; compared per step."""
    from .train import TrainSettings, run_trajectory
    from .train_report import build_train_report, print_train_summary, write_train_report

    console = wide_console()
    settings = TrainSettings(config=args.config, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                             train_size=args.train_size, val_size=args.val_size)

    def progress(record):
        failed = sum(not r.passed for r in record.results)
        console.print(f"step {record.step}/{settings.steps}: loss before update native "
                      f"{record.train_loss['native']:.6g}, reference {record.train_loss['reference']:.6g}; "
                      f"{failed} of {len(record.results)} failed")

    data = build_train_report(run_trajectory(settings, progress))
    path = write_train_report(data, Path(args.report))
    print_train_summary(data, console)
    console.print(f"report: {path}; pictures: {', '.join(data['pictures'])}")
    return 0 if data["passed"] else 1


def cmd_fixtures(args) -> int:
    """Regenerate the golden traces; fail (and keep the committed ones) if their content changed, unless forced."""
    from .golden import GOLDEN_DIR, regenerate

    changed = regenerate(GOLDEN_DIR, force=args.force_regen)
    if changed and changed != ["(no golden files yet)"] and not args.force_regen:
        print(f"golden traces differ from the committed ones in: {', '.join(changed)}; nothing written. "
              "Rerun with --force-regen if the change is intended.")
        return 1
    print(f"golden traces in {GOLDEN_DIR}: " + ("rewritten: " + ", ".join(changed) if changed else "unchanged"))
    return 0


def cmd_golden(args) -> int:
    """The native module against the golden traces, without torch."""
    from .golden import check_native

    failures = check_native()
    for line in failures:
        print(f"FAIL {line}")
    print("golden check: " + ("PASS" if not failures else f"FAIL ({len(failures)} tensors)"))
    return 1 if failures else 0


def cmd_diff(args) -> int:
    from .diff import diff_layer

    return diff_layer(args.layer, args.scenario, args.batch_sizes, native_dump=args.native_dump)


def cmd_bench(args) -> int:
    import os
    from dataclasses import replace

    from .bench import DEFAULT, FULL, run

    profile = FULL if args.full else DEFAULT
    if args.repeats is not None:
        if args.repeats < 1:
            raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
        profile = replace(profile, repeats=args.repeats)
    return run(profile, args.threads or os.cpu_count(), Path(args.output), wide_console())


def cmd_matrix(args) -> int:
    from .matrix import DEFAULT_SELECTION, run

    if args.generated < 1:
        raise ValueError(f"--generated must be >= 1, got {args.generated}")
    return run(args.select or DEFAULT_SELECTION, args.generated, args.cells, wide_console())


def main(argv=None) -> int:
    reuse_freed_memory()
    parser = argparse.ArgumentParser(prog="python -m parity", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("run", "compare every tensor of a scenario"), ("diff", "explain one tensor")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--scenario", default=DEFAULT_SCENARIO, help="a fixture name under fixtures/scenarios")
        p.add_argument("--batch-sizes", type=_batch_sizes, default=None, help="e.g. 1,2,4 (default: the fixture's)")
        if name == "run":
            p.add_argument("--report", default=str(DEFAULT_REPORT), help="JSON report path")
            p.add_argument("--model", choices=_packaged_models(), default="ssd300",
                           help="the model compared (resnet8: --scenario random|offset|zero_image, default all)")
        else:
            p.add_argument("layer", help="a tap name, e.g. conf_head")
            p.add_argument("--native-dump", default=None,
                           help="explain the tensor of this dump (its own scenario and batch size) instead")
    compare = sub.add_parser("compare", help="compare a dump written by any port against the reference")
    compare.add_argument("--native-dump", required=True, help="directory with manifest.json (parity/dump.py)")
    compare.add_argument("--report", default=str(DEFAULT_REPORT), help="JSON report path")
    compare.add_argument("--require", choices=("forward", "loss", "backward", "all"), default=None,
                         help="tensors of this group the dump lacks fail (default: compare what the dump has and "
                              "list the rest as not provided)")
    inputs = sub.add_parser("inputs", help="write a scenario's images, boxes, labels and weights for a port")
    inputs.add_argument("--scenario", default=DEFAULT_SCENARIO)
    inputs.add_argument("--batch-size", type=int, default=1)
    inputs.add_argument("--out", required=True)
    stages = sub.add_parser("stage-inputs", help="write the reference's inputs to every isolated stage, for a port")
    stages.add_argument("--scenario", default=DEFAULT_SCENARIO)
    stages.add_argument("--batch-size", type=int, default=1)
    stages.add_argument("--out", required=True)
    dump = sub.add_parser("dump", help="write the native module's trace as a dump")
    dump.add_argument("--scenario", default=DEFAULT_SCENARIO)
    dump.add_argument("--batch-size", type=int, default=1)
    dump.add_argument("--out", required=True)
    train = sub.add_parser("train", help="training-trajectory parity: train both sides, compare every step")
    train.add_argument("--config", default="narrow")
    train.add_argument("--steps", type=int, default=16)
    train.add_argument("--batch-size", type=int, default=2)
    train.add_argument("--train-size", type=int, default=16)
    train.add_argument("--val-size", type=int, default=4)
    train.add_argument("--lr", type=float, default=1e-4)
    train.add_argument("--report", default="reports/train-parity.json")
    fixtures = sub.add_parser("fixtures", help="regenerate the golden traces (fails on drift without --force-regen)")
    fixtures.add_argument("--force-regen", action="store_true")
    sub.add_parser("golden", help="check the native module against the golden traces, without torch")
    faults = sub.add_parser("faults", help="switch on each catalogued porting bug; detected and localized?")
    faults.add_argument("only", nargs="*", help="fault names (default: all)")
    matrix = sub.add_parser("matrix", help="the sweep under every CPU path of both sides and 1 and 2 threads")
    matrix.add_argument("--select", default=None, help="pytest -k expression (default: the narrow cases)")
    matrix.add_argument("--generated", type=int, default=60, help="generated scenarios per cell")
    matrix.add_argument("--cells", nargs="*", default=[], help="cell names (default: all of this CPU's)")
    bench = sub.add_parser("bench", help="native against PyTorch: time, GFLOP/s, memory, scaling, harness cost")
    bench.add_argument("--full", action="store_true",
                       help="the long bench: batch 1, 2, 4 and 8, every convolution, more rounds (about 27 min)")
    bench.add_argument("--repeats", type=int, default=None, help="rounds after a warm-up (default: the profile's)")
    bench.add_argument("--threads", type=int, default=0, help="threads for both sides (default: every core)")
    bench.add_argument("--output", default="reports/bench.json")
    args = parser.parse_args(argv)
    try:
        commands = {"run": cmd_run, "diff": cmd_diff, "compare": cmd_compare, "dump": cmd_dump, "inputs": cmd_inputs,
                    "stage-inputs": cmd_stage_inputs, "faults": cmd_faults,
                    "train": cmd_train, "fixtures": cmd_fixtures, "golden": cmd_golden,
                    "bench": cmd_bench, "matrix": cmd_matrix}
        return commands[args.command](args)
    except ValueError as error:
        # One line, never wrapped, the message's own brackets not read as markup.
        wide_console(stderr=True).print(f"[red]error:[/red] {escape(str(error))}", soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())

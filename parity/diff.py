"""`make diff LAYER=<tap>`: one tensor, explained, for each batch size of a scenario."""

from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from models.ssd300.case import compare_sides
from models.ssd300.scenarios import load_scenarios
from models.ssd300.sides import run_sides

from .cases import tensor_names
from .console import wide_console
from .core.rules import format_meaning
from .diff_plots import error_array, save_pictures, text_histogram


def known_taps() -> list:
    return [name for names in tensor_names().values() for name in names]


def _index_table(result) -> Table:
    verdict = "[green]pass[/green]" if result.passed else "[red]FAIL[/red]"
    table = Table(title=f"{result.display_name}  [{result.case}]  {verdict}", title_justify="left", show_header=False)
    table.add_column("metric")
    table.add_column("value")
    table.add_row("shape, dtype", f"{tuple(result.shape)} {result.dtype}")
    table.add_row("entries differing", f"{result.metrics.get('differing', 0)} of {int(np.prod(result.shape))}")
    table.add_row("ties (equal losses / near-tied decisions)", str(result.ties))
    table.add_row("rule", result.bound["derivation"])
    if result.strict64:
        table.add_row("native float64 vs oracle", f"{result.strict64['mismatches']} mismatches, {result.strict64['ties']} ties")
    return table


def _metrics_table(result) -> Table:
    if result.kind == "index":
        return _index_table(result)
    m, o = result.metrics, result.oracle
    verdict = "[green]pass[/green]" if result.passed else "[red]FAIL[/red]"
    table = Table(title=f"{result.display_name}  [{result.case}]  {verdict}", title_justify="left", show_header=False)
    table.add_column("metric")
    table.add_column("value")
    rows = [
        ("shape, dtype", f"{tuple(result.shape)} {result.dtype}"),
        ("native vs reference", f"max abs {m['max_abs']:.3g}, max rel {m['max_rel']:.3g}, NMSE {m['nmse']:.3g}, "
                                f"cosine {m['cosine']:.9f}, max ULP {m['max_ulp']}"),
        ("vs float64 oracle", f"native {o['native_error']:.3g}, reference {o['reference_error'] or 0:.3g}"
                              + (f", ratio {round(o['ratio'], 3)}" if o.get("ratio") is not None else "")),
        ("bound", f"{result.bound['value']:.3g} = {result.bound['derivation']}"
                  + (" (the largest of the per-element bounds)" if "native_margin" in result.bound else "")),
        ("elements beyond bound", f"{result.mismatches} of {int(np.prod(result.shape))}"),
    ]
    if "native_margin" in result.bound:
        rows.append(("margin: largest error / bound", f"native {result.bound['native_margin']:.3g}, reference "
                                                      f"{result.bound['reference_margin']:.3g} (1 is the bound)"))
    if result.typical:
        n, r = result.typical["native"], result.typical["reference"]
        rows.append(("typical error: RMS / float32's", f"native {n['ratio']:.3g}, reference {r['ratio']:.3g}, limit "
                                                       f"{n['limit']:.3g} over {n['samples']} distinct elements"))
        if n.get("channel"):
            c = n["channel"]
            rows.append(("typical error, worst channel", f"native channel {c['index']}: {c['ratio']:.3g}, limit "
                                                         f"{c['limit']:.3g} over {c['samples']} elements"))
    if result.probe:
        n = result.probe["native"]
        rows.append(("exact probe", f"native: {n['differ']} of {n['elements']} elements differ"
                     + (f" (largest {n['units']:.3g} roundings at {n['worst']}, output channels {n['channels'][:8]})"
                        if n["differ"] else "") + f"; biases unseen: {len(result.probe['unseen_biases'])}"))
    if result.strict64:
        s = result.strict64
        rows.append(("native float64 vs oracle", f"max abs {s['max_abs']:.3g} (bound {s['bound']['derivation']})"))
    for label, value in rows:
        table.add_row(label, value)
    return table


def _worst_table(result) -> Table:
    by_margin = bool(result.worst) and "margin" in result.worst[0]
    title = "worst elements (by |native - float64 oracle| / bound)" if by_margin else \
        "worst elements (by |native - float64 oracle|)"
    table = Table(title=title, title_justify="left")
    for column in ("#", "index", "meaning", "native", "reference", "oracle", "|native - oracle|") + \
            (("bound", "error / bound") if by_margin else ()):
        table.add_column(column)
    for rank, row in enumerate(result.worst, 1):
        table.add_row(
            str(rank), str(tuple(row["index"])), format_meaning(row["meaning"]), f"{row['native']:.9g}",
            f"{row['reference']:.9g}", f"{row.get('oracle', float('nan')):.9g}",
            f"{row['abs_error']:.3g}" if "abs_error" in row else row.get("note", "differs"),
            *((f"{row['bound']:.3g}", f"{row['margin']:.3g}") if by_margin else ()),
        )
    return table


def diff_layer(layer: str, scenario_name: str, batch_sizes: list | None, console: Console | None = None,
               picture_dir: Path = Path("reports") / "diff", native_dump: Path | None = None) -> int:
    """native_dump: explain the tensor of a port's dump (parity/dump.py), on the dump's scenario and batch size."""
    console = console or wide_console()
    taps = known_taps()
    native, port_name = None, None
    if native_dump is not None:
        from .dump import load_dump_case

        scenario, native, port_names = load_dump_case(Path(native_dump))
        by_port = {port: harness for harness, port in port_names.items()}
        if layer in by_port:  # the port's own name for the tensor
            port_name, layer = layer, by_port[layer]
    if layer not in taps:
        console.print(f"[red]unknown layer {layer!r}[/red]. Valid names:")
        console.print("  " + "\n  ".join(taps))
        return 2
    if native_dump is not None:
        from .dump import DumpError

        if layer not in native:
            raise DumpError(f"{Path(native_dump) / 'manifest.json'}: the dump does not provide {layer!r}")
        scenarios = [scenario]
    else:
        scenarios = load_scenarios(scenario_name, batch_sizes)
    failed = False
    for scenario in scenarios:
        # A forward tap needs only the forward pass; anything else the whole step.
        traces = run_sides(scenario, step=layer not in tensor_names()["forward"], native=native)
        result = next(r for r in compare_sides(traces) if r.name == layer)
        result.port_name = port_name or ""
        failed |= not result.passed
        console.print(_metrics_table(result))
        yardstick = traces.reference if result.kind in ("index", "exact") else traces.oracle
        error = error_array(traces.native[layer], yardstick[layer])
        console.print(f"errors per decade (bound {result.bound.get('value', 0):.3g}):\n" + text_histogram(error, result.bound.get("value")))
        for path in save_pictures(layer, scenario.id, error, result.bound.get("value"), picture_dir):
            console.print(f"picture: {path}")
        for reason in result.reasons:
            console.print(f"[red]- {reason}[/red]")
        console.print(_worst_table(result))
        console.print()
    return 1 if failed else 0

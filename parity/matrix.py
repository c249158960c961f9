"""The CPU matrix: the parity sweep run under every CPU path of both sides, to show that no correct
implementation raises an alarm anywhere (`make matrix`, `python -m parity matrix`).

A cell is one process with one reference path (oneDNN's ISA and ATen's kernels: AVX-512 where the CPU has it,
AVX2, the SSE4.1/baseline path), one native path (the packed GEMM's AVX-512 or AVX2 tile, or every 3x3
convolution on the im2col GEMM, which rounds in another order) and a thread count. Every reference path runs at
1 and 2 threads, and the native paths take turns over those cells, so each native path also meets both thread
counts. Each cell runs `pytest parity/` on the selected cases (default: the narrow config's fixtures and the
generated scenarios) and writes its own JSON report under reports/matrix/."""

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .machine import has_avx512 as _cpu_has_avx512

REPORTS = Path("reports/matrix")
DEFAULT_SELECTION = "not ssd300 and not default"


@dataclass
class Cell:
    reference: str
    native: str
    threads: int
    environment: dict

    @property
    def name(self) -> str:
        return f"ref-{self.reference}.native-{self.native}.threads-{self.threads}"


def cells() -> list:
    avx512 = _cpu_has_avx512()
    references = ([("avx512", {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "ATEN_CPU_CAPABILITY": "avx512"})] if avx512 else [])
    references += [("avx2", {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}),
                   ("baseline", {"ONEDNN_MAX_CPU_ISA": "SSE41", "ATEN_CPU_CAPABILITY": "default"})]
    natives = ([("gemm-avx512", {"SSD_NATIVE_ISA": "avx512"})] if avx512 else [])
    natives += [("gemm-avx2", {"SSD_NATIVE_ISA": "avx2"}), ("im2col", {"SSD_NATIVE_ISA": "avx2", "SSD_NATIVE_CONV3X3": "0"})]
    result = []
    for i, (reference, reference_env) in enumerate(references):
        for j, threads in enumerate((1, 2)):
            native, native_env = natives[(i + j) % len(natives)]
            env = {**reference_env, **native_env, "OMP_NUM_THREADS": str(threads)}
            result.append(Cell(reference, native, threads, env))
    return result


def run(selection: str, generated: int, only: list, console) -> int:
    chosen = [c for c in cells() if not only or c.name in only]
    if only and len(chosen) != len(only):
        known = ", ".join(c.name for c in cells())
        raise ValueError(f"unknown matrix cells {sorted(set(only) - {c.name for c in chosen})}; this CPU's cells: {known}")
    REPORTS.mkdir(parents=True, exist_ok=True)
    rows = []
    for cell in chosen:
        env = {**os.environ, **cell.environment, "PARITY_GENERATED_EXAMPLES": str(generated)}
        report = REPORTS / f"{cell.name}.json"
        command = [sys.executable, "-m", "pytest", "parity", "-q", "-p", "no:cacheprovider", "-k", selection,
                   "--parity-report", str(report), "--junitxml", str(REPORTS / f"{cell.name}.xml")]
        console.print(f"[bold]{cell.name}[/bold]: {' '.join(f'{k}={v}' for k, v in cell.environment.items())}")
        start = time.monotonic()
        completed = subprocess.run(command, env=env, capture_output=True, text=True)
        summary = (completed.stdout.strip().splitlines() or ["(no output)"])[-1]
        rows.append((cell, completed.returncode, summary, time.monotonic() - start))
        console.print(f"  exit {completed.returncode}: {summary}")
        if completed.returncode != 0:
            console.print(completed.stdout[-4000:], markup=False)
    _print_table(rows, console)
    return 0 if all(code == 0 for _, code, _, _ in rows) else 1


def _print_table(rows, console) -> None:
    from rich.table import Table

    table = Table(title="CPU matrix: the sweep under every path", title_justify="left")
    for column in ("reference path", "native path", "threads", "result", "minutes"):
        table.add_column(column)
    for cell, code, summary, seconds in rows:
        verdict = f"[green]{summary}[/green]" if code == 0 else f"[red]{summary}[/red]"
        table.add_row(cell.reference, cell.native, str(cell.threads), verdict, f"{seconds / 60:.1f}")
    console.print(table)

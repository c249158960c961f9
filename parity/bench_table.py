"""docs/bench.md's table of results per machine kind, generated from the committed result files
(bench/results/*.json, each one `make bench` run's reports/bench.json): the numbers in the docs are those files'.

    python -m parity.bench_table            # rewrite the table in docs/bench.md
    python -m parity.bench_table --check    # exit 1 if docs/bench.md's table is not the files' (a test runs this)
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DOCS = ROOT / "docs" / "bench.md"
BEGIN, END = "<!-- results table: python -m parity.bench_table -->", "<!-- end of results table -->"
COLUMNS = ("machine", "code, date", "bench", "step B4", "forward B1", "memory B4", "parity run B4", "per image",
           "minutes")


def _time(target: dict) -> str:
    rounds = target["round_ratios"]
    return f"{target['ratio']:.2f} ({rounds['min']:.2f}-{rounds['max']:.2f})"


def row(result: dict) -> str:
    """One result file as a table row: each time verdict the median of its rounds, their range in parentheses."""
    machine = result["machine"]
    by_start = lambda start: next(t for t in result["targets"] if t["measure"].startswith(start))
    step, forward = by_start("training step B4, native/PyTorch time"), by_start("forward B1")
    memory, harness = by_start("training step B4, native/PyTorch peak memory"), by_start("parity run B4")
    native_per_image = by_start("native time per image")
    isa = machine["isa"]
    native_path, torch_path = machine.get("native_gemm_kernel", isa), machine.get("torch_cpu_capability", isa).lower()
    if (native_path, torch_path) != (isa, isa):  # a run held to narrower paths (SSD_NATIVE_ISA, ATEN_CPU_CAPABILITY)
        isa = f"{isa} held to native {native_path}, PyTorch {torch_path}"
    cells = [f"{machine['cpu']}, {isa}, {machine['cores']} cores, torch {machine['torch']}",
             f"{result.get('commit', '?')[:7]}, {result.get('created', '?')[:10]}", result["profile"]["name"],
             _time(step), _time(forward), f"{memory['ratio']:.2f}", f"{harness['ratio']:.2f}",
             f"{native_per_image['measure'].split(', ')[1]} native {native_per_image['ratio']:.2f}",
             f"{result['bench_minutes']:.1f}"]
    return "| " + " | ".join(cells) + " |"


def table(results_dir: Path = RESULTS) -> str:
    results = [json.loads(path.read_text()) for path in sorted(results_dir.glob("*.json"))]
    rows = [row(result) for result in sorted(results, key=lambda result: result.get("created", ""))]  # oldest first
    header = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join([BEGIN, *header, *rows, END])


def with_table(text: str, generated: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + generated + text[end:]


def main(argv: list) -> int:
    text = DOCS.read_text()
    updated = with_table(text, table())
    if "--check" in argv:
        if updated != text:
            print(f"{DOCS} has a results table that is not bench/results/*.json's: run python -m parity.bench_table")
            return 1
        return 0
    DOCS.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

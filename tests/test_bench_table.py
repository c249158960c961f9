"""docs/bench.md's results table is generated from the committed result files (parity/bench_table.py): the docs
show those files' numbers, and a table edited by hand, or a file added without regenerating it, fails here."""

import json

from parity import bench_table
from tests.test_bench_report import made_up_result


def _made_up_file(directory, name="2026-12-04-avx2-abc.json"):
    result = made_up_result()
    result.update(machine={"cpu": "AMD EPYC (family 25, model 1)", "isa": "avx2", "cores": 2, "torch": "2.14.1"},
                  commit="abcdef0123456789", created="2026-12-04T21:00:00+00:00")
    (directory / name).write_text(json.dumps(result))
    return result


def test_docs_bench_md_shows_the_committed_result_files():
    assert bench_table.main(["--check"]) == 0, "run python -m parity.bench_table and commit docs/bench.md"


def test_a_result_file_becomes_a_row_with_its_machine_and_verdicts(tmp_path):
    result = _made_up_file(tmp_path)
    generated = bench_table.table(tmp_path)
    row = generated.splitlines()[3]
    step = next(t for t in result["targets"] if t["measure"].startswith("training step B4, native/PyTorch time"))
    assert row.startswith("| AMD EPYC (family 25, model 1), avx2, 2 cores, torch 2.14.1 | abcdef0, 2026-12-04 | full |")
    assert f"{step['ratio']:.2f} ({step['round_ratios']['min']:.2f}-{step['round_ratios']['max']:.2f})" in row
    assert "B8/B1 native" in row and row.endswith("| 27.0 |")


def test_a_run_held_to_narrower_paths_says_so(tmp_path):
    result = _made_up_file(tmp_path)
    result["machine"].update(isa="avx512", native_gemm_kernel="avx2", torch_cpu_capability="AVX2")
    assert "avx512 held to native avx2, PyTorch avx2, 2 cores" in bench_table.row(result)
    result["machine"].update(native_gemm_kernel="avx512", torch_cpu_capability="AVX512")
    assert "| AMD EPYC (family 25, model 1), avx512, 2 cores," in bench_table.row(result)


def test_rows_go_oldest_first(tmp_path):
    _made_up_file(tmp_path, "b-newer.json")
    older = made_up_result() | {"machine": {"cpu": "older", "isa": "avx2", "cores": 2, "torch": "2.14.1"},
                                "created": "2026-12-01T00:00:00+00:00"}
    (tmp_path / "z-older.json").write_text(json.dumps(older))
    rows = bench_table.table(tmp_path).splitlines()[3:5]
    assert rows[0].startswith("| older,") and rows[1].startswith("| AMD EPYC")


def test_a_table_that_is_not_the_files_is_told_apart(tmp_path):
    _made_up_file(tmp_path)
    text = f"intro\n{bench_table.BEGIN}\n| hand-typed |\n{bench_table.END}\nrest\n"
    assert bench_table.with_table(text, bench_table.table(tmp_path)) != text
    regenerated = bench_table.with_table(text, bench_table.table(tmp_path))
    assert bench_table.with_table(regenerated, bench_table.table(tmp_path)) == regenerated

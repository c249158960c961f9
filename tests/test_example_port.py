"""The example port (examples/c_port), a C++ program that is no Python module, goes through the dump protocol
end to end: inputs out, its own step computed, a full dump in, compared; its stages computed alone on the stage
inputs get the isolated verdicts the pybind11 route gives; with a fault switched on in it, the comparison fails
where the fault starts."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parity.cli import main

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "example-port"
CMAKE = str(Path(sys.executable).parent / "cmake")


@pytest.fixture(scope="module")
def port(tmp_path_factory):
    """(the program, the narrow B2 inputs, their stage inputs)"""
    subprocess.run([CMAKE, "-S", str(ROOT / "examples" / "c_port"), "-B", str(BUILD), "-G", "Ninja",
                    f"-DOPENBLAS_PYTHON={sys.executable}"], check=True, capture_output=True)
    subprocess.run([CMAKE, "--build", str(BUILD)], check=True, capture_output=True)
    inputs = tmp_path_factory.mktemp("inputs")
    assert main(["inputs", "--scenario", "narrow", "--batch-size", "2", "--out", str(inputs)]) == 0
    stages = tmp_path_factory.mktemp("stages")
    assert main(["stage-inputs", "--scenario", "narrow", "--batch-size", "2", "--out", str(stages)]) == 0
    return BUILD / "ssd_port", inputs, stages


def _run(port, tmp_path, fault=None, isolated=False) -> dict:
    program, inputs, stages = port
    dump = tmp_path / ("dump-" + (fault or "clean"))
    dump.mkdir()
    env = dict(os.environ, **({"SSD_PORT_FAULT": fault} if fault else {}))
    subprocess.run([str(program), str(inputs), str(dump)] + ([str(stages)] if isolated else []), check=True, env=env)
    report = tmp_path / "report.json"
    main(["compare", "--native-dump", str(dump), "--require", "all", "--report", str(report)])
    return json.loads(report.read_text())


def test_the_example_port_passes_every_tensor(port, tmp_path):
    report = _run(port, tmp_path)
    run = report["runs"][0]
    assert report["passed"] and (run["compared"], run["not_provided"]) == (166, [])


def test_the_example_port_with_a_fault_fails_where_it_starts(port, tmp_path):
    report = _run(port, tmp_path, "bias_added_twice")
    assert not report["passed"] and report["runs"][0]["first_divergence"]["name"] == "backbone.conv2_1"


def test_an_unknown_fault_and_missing_inputs_are_clean_errors(port, tmp_path):
    program, inputs, _ = port
    bad = subprocess.run([str(program), str(inputs), str(tmp_path)], env=dict(os.environ, SSD_PORT_FAULT="nope"),
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown fault 'nope'" in bad.stderr
    missing = subprocess.run([str(program), str(tmp_path / "nowhere"), str(tmp_path)], capture_output=True, text=True)
    assert missing.returncode == 2 and "index.txt: cannot open" in missing.stderr


def test_its_stages_over_files_get_the_isolated_verdicts_of_the_pybind11_route(port, tmp_path):
    from models.ssd300.case import compare_sides
    from models.ssd300.isolated import isolated_results
    from models.ssd300.scenarios import load_scenarios
    from models.ssd300.sides import native_model_for
    from parity.stage_files import reference_for_stages

    report = _run(port, tmp_path, isolated=True)
    by_files = {t["name"]: t["verdict"] for t in report["tensors"] if t["mode"] == "isolated"}
    scenario = load_scenarios("narrow", [2])[0]
    traces = reference_for_stages(scenario)
    compare_sides(traces)
    by_module = {r.name: r.verdict for r in isolated_results(traces, native_model_for(scenario))}
    assert len(by_files) == 166 and by_files == by_module
    faulted = _run(port, tmp_path, "bias_added_twice", isolated=True)
    assert faulted["runs"][0]["isolated"]["first_divergence"]["name"] == "backbone.conv2_1"

"""A scenario's inputs go out in the dump format, and a dump that names other inputs than its scenario's is
refused, naming them."""

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from models.ssd300.scenarios import load_scenarios
from parity.cli import main
from parity.dump_inputs import checksums, scenario_inputs


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    directory = tmp_path_factory.mktemp("inputs")
    assert main(["inputs", "--scenario", "narrow", "--batch-size", "2", "--out", str(directory)]) == 0
    return directory


def test_inputs_hold_what_the_step_is_computed_on(exported):
    expected = scenario_inputs(load_scenarios("narrow", [2])[0])
    manifest = json.loads((exported / "manifest.json").read_text())
    assert [e["name"] for e in manifest["tensors"]] == list(expected)
    assert manifest["batch_size"] == 2 and manifest["steps"] == 1
    assert sum(name.startswith("weights/") for name in expected) == 71
    index = (exported / "index.txt").read_text().splitlines()
    assert index[0] == "images float32 images.bin 4 2 3 300 300"
    stored = load_file(str(exported / "inputs.safetensors"))
    for entry, line in zip(manifest["tensors"], index):
        raw = np.fromfile(exported / entry["file"], dtype="<f4" if entry["dtype"] == "float32" else "<i8")
        np.testing.assert_array_equal(raw.reshape(entry["shape"]), expected[entry["name"]])
        np.testing.assert_array_equal(stored[entry["name"]], expected[entry["name"]])
        assert line.split()[:3] == [entry["name"], entry["dtype"], entry["file"]]


def test_a_dump_computed_on_other_inputs_is_refused(tmp_path, capsys):
    directory = tmp_path / "dump"
    assert main(["dump", "--scenario", "narrow", "--batch-size", "1", "--out", str(directory)]) == 0
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["inputs"] == checksums(scenario_inputs(load_scenarios("narrow", [1])[0]))
    manifest["inputs"]["weights/backbone.features.0.weight"] = "0" * 64
    (directory / "manifest.json").write_text(json.dumps(manifest))
    assert main(["compare", "--native-dump", str(directory)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "computed on other inputs than narrow-B1's: weights/backbone.features.0.weight" \
        " differ" in error

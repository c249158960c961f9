"""A malformed dump is a one-line error naming the file and the field, exit 2: each case the protocol can get
wrong, and a fuzz of manifests and files (hypothesis) where every example is a clean read or a DumpError."""

import copy
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.ssd300.scenarios import load_scenarios
from parity.cli import main
from parity.dump import DumpError, check_against_scenario, read_dump, write_dump

VALID = {"conf_head": np.zeros((1, 3, 21), np.float32), "match.labels": np.zeros((1, 3), np.int64),
         "mining.negatives": np.array([[True, False, True]])}


@pytest.fixture
def dump(tmp_path):
    directory = write_dump(tmp_path / "dump", "narrow", 1, VALID)
    return directory, json.loads((directory / "manifest.json").read_text())


def _write(directory, manifest):
    (directory / "manifest.json").write_text(json.dumps(manifest))


def _entry(manifest, name):
    return next(e for e in manifest["tensors"] if e["name"] == name)


CASES = [
    ("no scenario", lambda m: m.pop("scenario"), r"field 'scenario' is missing"),
    ("batch size a word", lambda m: m.update(batch_size="two"), r"field 'batch_size' is 'two'"),
    ("batch size true", lambda m: m.update(batch_size=True), r"field 'batch_size' is True"),
    ("batch size zero", lambda m: m.update(batch_size=0), r"field 'batch_size' is 0"),
    ("tensors not a list", lambda m: m.update(tensors={"a": 1}), r"field 'tensors' is \{'a': 1\}"),
    ("entry not an object", lambda m: m["tensors"].append(3), r"tensors\[3\] is 3"),
    ("entry without shape", lambda m: _entry(m, "conf_head").pop("shape"), r"'conf_head': field 'shape' is missing"),
    ("entry without file", lambda m: _entry(m, "conf_head").pop("file"), r"'conf_head': field 'file' is missing"),
    ("entry without name", lambda m: m["tensors"][0].pop("name"), r"tensors\[0\]: field 'name' is missing"),
    ("negative shape", lambda m: _entry(m, "conf_head").update(shape=[1, -3, 21]), r"field 'shape' is \[1, -3, 21\]"),
    ("overflowing shape", lambda m: _entry(m, "conf_head").update(shape=[2 ** 40, 2 ** 40]),
     r"'conf_head': field 'shape' is \[1099511627776, 1099511627776\]: .* bytes, more than"),
    ("listed twice", lambda m: m["tensors"].append(copy.deepcopy(m["tensors"][0])), r"'conf_head' is listed twice"),
    ("file outside", lambda m: _entry(m, "conf_head").update(file="../elsewhere.bin"),
     r"field 'file' is '../elsewhere.bin', outside the dump directory \(refused\)"),
    ("absolute file", lambda m: _entry(m, "conf_head").update(file="/etc/passwd"), r"outside the dump directory"),
    ("float tensor as int", lambda m: _entry(m, "conf_head").update(dtype="int32"),
     r"'conf_head': field 'dtype' is 'int32', but a float tensor is one of float32, float64"),
    ("index tensor as float", lambda m: _entry(m, "match.labels").update(dtype="float64"),
     r"'match.labels': field 'dtype' is 'float64', but an index tensor is one of int64, int32, uint8"),
    ("unknown dtype", lambda m: _entry(m, "conf_head").update(dtype="half"), r"field 'dtype' is 'half'"),
    ("not an object", lambda m: m.clear() or m.update(format=None), r"field 'format' is None"),
]


@pytest.mark.parametrize("mutate, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_malformed_manifest_is_a_named_one_line_error(dump, mutate, message, capsys):
    directory, manifest = dump
    mutate(manifest)
    _write(directory, manifest)
    with pytest.raises(DumpError, match=message) as error:
        read_dump(directory)
    assert str(directory) in str(error.value) and "\n" not in str(error.value)
    assert main(["compare", "--native-dump", str(directory)]) == 2
    error = capsys.readouterr().err
    assert "manifest.json" in error and error.count("\n") == 1


def test_out_of_range_values_are_named(dump):
    directory, _ = dump
    (directory / "mining.negatives.bin").write_bytes(bytes([0, 2, 1]))
    (directory / "manifest.json").write_text((directory / "manifest.json").read_text().replace('"sha256"', '"x"'))
    with pytest.raises(DumpError, match=r"mining.negatives.bin: values 0..2, expected 0 or 1"):
        read_dump(directory)


def test_values_the_scenario_bounds_are_named():
    scenario = load_scenarios("narrow", [1])[0]
    boxes = len(scenario.targets()[0][0])
    with pytest.raises(DumpError, match=r"match.labels: value 21, expected a class below 21 \(the narrow config's count\)"):
        check_against_scenario({"match.labels": np.array([[0, 21]])}, scenario, 21)
    with pytest.raises(DumpError, match=rf"match.matched_idx: value {boxes} in image 0, which has {boxes} ground"):
        check_against_scenario({"match.matched_idx": np.array([[-1, boxes]])}, scenario, 21)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=6)
KEYS = ["format", "scenario", "batch_size", "tensors"]
ENTRY_KEYS = ["name", "file", "dtype", "shape", "sha256"]


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_manifests_and_files_are_clean_errors_or_clean_reads(dump, data):
    directory, original = dump
    manifest = copy.deepcopy(original)
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.sampled_from(["top", "entry", "file", "raw"]))
        if where == "top":
            key = data.draw(st.sampled_from(KEYS + ["inputs"]))
            if data.draw(st.booleans()):
                manifest[key] = data.draw(JSON)
            else:
                manifest.pop(key, None)
        elif where == "entry" and isinstance(manifest.get("tensors"), list) and manifest["tensors"]:
            entry = data.draw(st.sampled_from(manifest["tensors"]))
            if isinstance(entry, dict):
                entry[data.draw(st.sampled_from(ENTRY_KEYS))] = data.draw(JSON)
        elif where == "file":
            path = directory / data.draw(st.sampled_from([e["file"] for e in original["tensors"]]))
            path.write_bytes(data.draw(st.binary(max_size=300)))
    text = json.dumps(manifest) if where != "raw" else data.draw(st.text(max_size=40))
    (directory / "manifest.json").write_text(text)
    try:
        _, _, trace = read_dump(directory)
    except DumpError as error:
        assert "\n" not in str(error) and str(directory) in str(error)
        return
    for entry in manifest["tensors"]:
        assert trace[entry["name"]].shape == tuple(entry["shape"])

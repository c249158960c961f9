"""The dump protocol: the project's own native module written as a dump passes through the same comparison a
C port would use; a damaged dump is a clear error naming the file; a wrong tensor in a dump fails by name."""

import json

import numpy as np
import pytest

from parity.cli import main
from parity.dump import read_dump, write_dump


@pytest.fixture(scope="module")
def native_dump(tmp_path_factory):
    directory = tmp_path_factory.mktemp("dump")
    assert main(["dump", "--scenario", "narrow", "--batch-size", "1", "--out", str(directory)]) == 0
    return directory


def test_native_module_passes_through_the_dump_path(native_dump, tmp_path):
    report_path = tmp_path / "report.json"
    assert main(["compare", "--native-dump", str(native_dump), "--report", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["passed"] and report["runs"][0]["compared"] == 166


def test_dump_round_trip_keeps_dtypes_and_values(native_dump):
    scenario, batch, trace = read_dump(native_dump)
    assert (scenario, batch) == ("narrow", 1)
    assert trace["mining.negatives"].dtype == np.bool_ and trace["match.matched_idx"].dtype == np.int64
    assert trace["conf_head"].shape == (1, 8732, 21) and trace["conf_head"].dtype == np.float32


def test_wrong_tensor_in_a_dump_fails_by_name(native_dump, tmp_path):
    _, _, trace = read_dump(native_dump)
    trace = dict(trace)
    trace["grad/backbone.conv6"] = trace["grad/backbone.conv6"] * np.float32(1.01)
    bad = write_dump(tmp_path / "bad", "narrow", 1, trace)
    report_path = tmp_path / "report.json"
    assert main(["compare", "--native-dump", str(bad), "--report", str(report_path)]) == 1
    assert json.loads(report_path.read_text())["runs"][0]["first_divergence"]["name"] == "grad/backbone.conv6"


def test_damaged_dumps_are_clear_errors(native_dump, tmp_path):
    _, _, trace = read_dump(native_dump)
    small = {"conf_head": trace["conf_head"]}
    directory = write_dump(tmp_path / "d", "narrow", 1, small)
    data = (directory / "conf_head.bin").read_bytes()
    (directory / "conf_head.bin").write_bytes(data[:-4])
    with pytest.raises(ValueError, match=r"conf_head.bin: 733484 bytes, expected 733488 for float32 \[1, 8732, 21\]"):
        read_dump(directory)
    (directory / "conf_head.bin").write_bytes(data[:-4] + b"\0\0\0\1")
    with pytest.raises(ValueError, match=r"conf_head.bin: checksum does not match"):
        read_dump(directory)
    (directory / "manifest.json").write_text("{")
    with pytest.raises(ValueError, match=r"manifest.json: not valid JSON"):
        read_dump(directory)
    with pytest.raises(ValueError, match=r"no manifest.json"):
        read_dump(tmp_path / "nowhere")


def _part(trace: dict, groups: set) -> dict:
    from parity.partial import group_of

    return {name: value for name, value in trace.items() if group_of(name) in groups}


def test_a_forward_only_dump_names_what_it_did_not_provide(native_dump, tmp_path, capsys):
    _, _, trace = read_dump(native_dump)
    directory = write_dump(tmp_path / "forward", "narrow", 1, _part(trace, {"forward"}))
    report_path = tmp_path / "report.json"
    assert main(["compare", "--native-dump", str(directory), "--report", str(report_path)]) == 0
    run = json.loads(report_path.read_text())["runs"][0]
    assert (run["compared"], run["known"], len(run["not_provided"])) == (44, 166, 122)
    assert "loss.total" in run["not_provided"] and "param_grad/backbone.features.0.weight" in run["not_provided"]
    assert "not provided (122)" in capsys.readouterr().out
    assert "not provided by the dump (122)" in report_path.with_suffix(".html").read_text()
    assert main(["compare", "--native-dump", str(directory), "--report", str(report_path), "--require", "all"]) == 1
    run = json.loads(report_path.read_text())["runs"][0]
    assert run["failed"] == 122 and run["first_divergence"]["reasons"] == ["not provided by the dump (--require all)"]
    assert main(["compare", "--native-dump", str(directory), "--report", str(report_path),
                 "--require", "forward"]) == 0


def test_a_dump_without_activations_is_judged_as_far_as_it_goes(native_dump, tmp_path):
    """Losses and gradients alone: no crash, no false alarm; what is computed from the missing activations is judged
    with them at their bounds (loose, said so), and a gradient fed by provided tensors keeps a tight bound."""
    _, _, trace = read_dump(native_dump)
    late = _part(trace, {"loss", "backward"})
    report_path = tmp_path / "report.json"
    assert main(["compare", "--native-dump", str(write_dump(tmp_path / "late", "narrow", 1, late)),
                 "--report", str(report_path)]) == 0
    run = json.loads(report_path.read_text())["runs"][0]
    assert (run["compared"], len(run["not_provided"]), run["harness_errors"]) == (122, 44, 0)
    assert run["assumed_missing"] > 0
    late["grad/backbone.conv1_2"] = late["grad/backbone.conv1_2"] * np.float32(1.001)
    assert main(["compare", "--native-dump", str(write_dump(tmp_path / "bad", "narrow", 1, late)),
                 "--report", str(report_path)]) == 1
    assert json.loads(report_path.read_text())["runs"][0]["first_divergence"]["name"] == "grad/backbone.conv1_2"


def test_negatives_without_the_per_prior_losses_are_compared(native_dump, tmp_path):
    _, _, trace = read_dump(native_dump)
    partial = {name: trace[name] for name in ("conf_head", "match.matched_idx", "match.labels", "mining.negatives")}
    report_path = tmp_path / "report.json"
    assert main(["compare", "--native-dump", str(write_dump(tmp_path / "neg", "narrow", 1, partial)),
                 "--report", str(report_path)]) == 0
    assert json.loads(report_path.read_text())["runs"][0]["compared"] == 4


def test_diff_explains_one_tensor_of_a_dump(native_dump, tmp_path, capsys):
    _, _, trace = read_dump(native_dump)
    trace = dict(trace)
    trace["conf_head"] = trace["conf_head"].copy()
    trace["conf_head"][0, 5000, 3] += np.float32(0.5)
    bad = write_dump(tmp_path / "bad", "narrow", 1, trace)
    assert main(["diff", "conf_head", "--native-dump", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "1 of 183372" in out and "(0, 5000, 3)" in out
    assert main(["diff", "conf_head", "--native-dump", str(native_dump)]) == 0
    del trace["conf_head"]
    assert main(["diff", "conf_head", "--native-dump", str(write_dump(tmp_path / "lack", "narrow", 1, trace))]) == 2
    assert "does not provide 'conf_head'" in capsys.readouterr().err

"""A dump that keeps its port's own names and layouts (parity/dump_layouts.py): compared without rewriting its
arrays, the port's names shown beside the harness's; a layout declared wrong fails where it is wrong; a malformed
declaration is a one-line error naming the file and the field."""

import json

import numpy as np
import pytest
import torch

from models.ssd300.reference.configs import IMAGE_SIZE, SOURCE_SIZES
from models.ssd300.scenarios import load_scenarios
from models.ssd300.sides import reference_model_for
from parity.cli import main
from parity.dump import DumpError, read_dump, write_dump
from parity.dump_layouts import BOX_LAYOUTS, to_harness_layout


def from_harness_layout(array: np.ndarray, layout: str | None) -> np.ndarray:
    """A harness array written the way a port with this layout keeps it: NCHW -> NHWC,
    xyxy pixels -> the box layout, in float64 and rounded once to float32."""
    if layout in (None, "NCHW", "xyxy-pixels"):
        return array
    if layout == "NHWC":
        return np.ascontiguousarray(array.transpose(0, 2, 3, 1))
    boxes = array.astype(np.float64)
    if layout.endswith("fractions"):
        boxes = boxes / IMAGE_SIZE
    if layout.startswith("cxcywh"):
        boxes = np.concatenate([(boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2]], axis=1)
    return boxes.astype(np.float32)


def _port_name(name: str) -> str:
    """A port's own naming: 'model/conv4_3:out', 'model/grad:conv4_3', ..."""
    return "model/" + name.replace("backbone.", "").replace("/", ":")


def _torchvision_centre_form() -> np.ndarray:
    """torchvision's own priors before its conversion: cx, cy, w, h as fractions (DefaultBoxGenerator)."""
    model = reference_model_for(load_scenarios("narrow", [1])[0])
    boxes = model.anchor_generator._grid_default_boxes([[s, s] for s in SOURCE_SIZES], [300, 300], dtype=torch.float32)
    return boxes.numpy()


def _as_port(trace: dict, directory, priors_layout="cxcywh-fractions", wrong=None):
    """The native trace written as a port would keep it: every name its own, every 4-D tensor NHWC, the priors in
    centre form; `wrong`: a tensor declared NHWC but written NCHW."""
    port = {}
    layouts = {}
    for name, array in trace.items():
        layout = "NHWC" if np.ndim(array) == 4 else None
        if name == "priors":
            layout = priors_layout
            array = _torchvision_centre_form() if layout == "cxcywh-fractions" else from_harness_layout(array, layout)
        elif layout and name != wrong:
            array = from_harness_layout(array, layout)
        port[_port_name(name)] = array
        if layout:
            layouts[_port_name(name)] = layout
    write_dump(directory, "narrow", 1, port)
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["names"] = {_port_name(name): name for name in trace}
    for entry in manifest["tensors"]:
        if entry["name"] in layouts:
            entry["layout"] = layouts[entry["name"]]
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


@pytest.fixture(scope="module")
def native_trace(tmp_path_factory):
    directory = tmp_path_factory.mktemp("dump")
    assert main(["dump", "--scenario", "narrow", "--batch-size", "1", "--out", str(directory)]) == 0
    return read_dump(directory)[2]


def test_torchvision_centre_form_converts_to_its_priors_bit_for_bit(native_trace):
    centre = _torchvision_centre_form()
    assert np.array_equal(to_harness_layout(centre, "cxcywh-fractions"), native_trace["priors"])
    half = np.float32(0.5)
    corners = np.concatenate([centre[:, :2] - half * centre[:, 2:], centre[:, :2] + half * centre[:, 2:]], axis=1)
    assert np.array_equal(to_harness_layout(corners, "xyxy-fractions"), native_trace["priors"])


@pytest.mark.parametrize("layout", BOX_LAYOUTS + ("NHWC",))
def test_every_layout_reads_back_what_was_written(native_trace, layout):
    name = "priors" if layout in BOX_LAYOUTS else "backbone.conv4_3"
    value = native_trace[name]
    restored = to_harness_layout(from_harness_layout(value, layout), layout)
    assert restored.shape == value.shape
    if layout == "NHWC":
        assert np.array_equal(restored, value)
    else:  # a float32 round trip through another box form: within a few units in the last place of 300 pixels
        assert np.abs(restored.astype(np.float64) - value).max() <= 4 * 300 * 2.0 ** -24


def test_a_port_with_its_own_names_and_layouts_passes_and_its_names_are_shown(native_trace, tmp_path, capsys):
    dump = _as_port(native_trace, tmp_path / "port")
    report_path = tmp_path / "report.json"
    assert main(["compare", "--native-dump", str(dump), "--report", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["passed"] and report["runs"][0]["compared"] == len(native_trace) == 166
    by_name = {t["name"]: t for t in report["tensors"]}
    assert by_name["backbone.conv4_3"]["port_name"] == "model/conv4_3"
    assert by_name["grad/backbone.conv4_3"]["port_name"] == "model/grad:conv4_3"
    assert by_name["priors"]["verdict"] == "pass"  # converted in torchvision's order: still bit for bit
    assert "model/" in (tmp_path / "report.html").read_text()
    assert main(["diff", "model/conv4_3", "--native-dump", str(dump)]) == 0
    assert "backbone.conv4_3 (port: model/conv4_3)" in capsys.readouterr().out


def test_a_layout_declared_wrong_fails_at_that_tensor_and_names_the_port(native_trace, tmp_path):
    dump = _as_port(native_trace, tmp_path / "port", wrong="backbone.conv4_3")
    report_path = tmp_path / "report.json"
    assert main(["compare", "--native-dump", str(dump), "--report", str(report_path)]) == 1
    first = json.loads(report_path.read_text())["runs"][0]["first_divergence"]
    assert first["name"] == "backbone.conv4_3" and first["port_name"] == "model/conv4_3"


def test_priors_written_in_pixels_centre_form_are_judged_exactly(native_trace, tmp_path):
    """cx, cy, w, h in pixels is not a form torchvision passes through: its conversion rounds on its own, and the
    priors are still held to bit identity (the report says where they differ), never silently forgiven."""
    centre = from_harness_layout(native_trace["priors"], "cxcywh-pixels")
    converted = to_harness_layout(centre, "cxcywh-pixels")
    dump = _as_port(native_trace, tmp_path / "port", priors_layout="cxcywh-pixels")
    report_path = tmp_path / "report.json"
    expected = 0 if np.array_equal(converted, native_trace["priors"]) else 1
    assert main(["compare", "--native-dump", str(dump), "--report", str(report_path)]) == expected
    priors = next(t for t in json.loads(report_path.read_text())["tensors"] if t["name"] == "priors")
    assert (priors["verdict"] == "pass") == (expected == 0)


def _edited(directory, edit):
    manifest = json.loads((directory / "manifest.json").read_text())
    edit(manifest)
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def _entry(manifest, port_name):
    return next(e for e in manifest["tensors"] if e["name"] == port_name)


@pytest.mark.parametrize("edit, message", [
    (lambda m: _entry(m, "model/priors").update(layout="NHWC"), "field 'layout' is 'NHWC', but the tensor has 2"),
    (lambda m: _entry(m, "model/conv4_3").update(layout="cxcywh-pixels"), "a box layout, but the tensor is"),
    (lambda m: _entry(m, "model/conv4_3").update(layout="HWC"), "field 'layout' is 'HWC', expected one of"),
    (lambda m: _entry(m, "model/conv4_3").update(layout=4), "field 'layout' is 4, expected a layout name"),
    (lambda m: m.update(names=["conv4_3"]), "field 'names' is ['conv4_3'], expected {port name: harness name}"),
    (lambda m: m["names"].update({"model/conv4_3": "backbone.pool4"}), "maps both"),
    (lambda m: m["tensors"].append(dict(_entry(m, "model/conv4_3"), name="backbone.conv4_3", file="other.bin")),
     "tensor 'backbone.conv4_3' is listed twice ('model/conv4_3' as 'backbone.conv4_3', through 'names')"),
])
def test_a_malformed_declaration_is_a_one_line_error_naming_the_file(native_trace, tmp_path, capsys, edit, message):
    dump = _edited(_as_port(native_trace, tmp_path / "port"), edit)
    with pytest.raises(DumpError, match="manifest.json") as error:
        read_dump(dump)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert main(["compare", "--native-dump", str(dump), "--report", str(tmp_path / "r.json")]) == 2

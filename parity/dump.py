"""The dump protocol: how a port that is not a pybind11 module hands its tensors to the harness.

A dump is a directory:

    DIR/manifest.json
    DIR/<file> ...            one file per tensor: raw little-endian values, C order (row-major), no header

manifest.json:

    {"format": "ssd-parity-dump/1",
     "scenario": "narrow",            # a fixture under fixtures/scenarios
     "batch_size": 2,
     "tensors": [{"name": "conf_head", "file": "conf_head.bin", "dtype": "float32", "shape": [2, 8732, 21],
                  "sha256": "..."},   # optional; verified when present
                 ...],
     "inputs": {"images": "<sha256>", ...}}  # optional: what it was computed on (python -m parity inputs)

Names are the harness's tensor names (README), or the port's own with a "names" map, and a tensor may keep its
port's layout ("layout": NHWC feature maps, boxes in cxcywh or fractions; parity/dump_layouts.py); dtype float32 or
float64 for a float tensor, int64, int32 or uint8 for an index tensor (uint8 0/1 for mining.negatives). A malformed
manifest or file is a DumpError naming the file and the field (parity/dump_manifest.py). Any C program can write it with fwrite. `python -m parity compare --native-dump DIR`
compares a dump against the reference on the same scenario; the project's own native module goes through the
same path in tests/test_dump.py.
"""

import hashlib
import json
from pathlib import Path

import numpy as np

from .dump_layouts import to_harness_layout
from .dump_manifest import BOOLEAN_TENSORS, DTYPES, FORMAT, DumpError, check_index_values, harness_name, load_manifest


def _file_name(name: str) -> str:
    return name.replace("/", "__") + ".bin"


def write_dump(directory: Path, scenario: str, batch_size: int, trace: dict, inputs: dict | None = None,
               index: bool = False) -> Path:
    """inputs: the checksums of the inputs the trace was computed on (parity/dump_inputs.py), recorded; index: also
    write index.txt, the list for C (native/include/parity_dump.h)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, array in trace.items():
        array = np.asarray(array)
        if array.dtype == np.bool_:
            array = array.astype(np.uint8)
        dtype = next(k for k, v in DTYPES.items() if np.dtype(v) == array.dtype.newbyteorder("<"))
        data = np.ascontiguousarray(array, dtype=DTYPES[dtype]).tobytes()
        (directory / _file_name(name)).write_bytes(data)
        entries.append({"name": name, "file": _file_name(name), "dtype": dtype, "shape": list(array.shape),
                        "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {"format": FORMAT, "scenario": scenario, "batch_size": batch_size, "tensors": entries}
    if inputs is not None:
        manifest["inputs"] = inputs
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1))
    if index:
        (directory / "index.txt").write_text("".join(
            " ".join([e["name"], e["dtype"], e["file"], str(len(e["shape"])), *map(str, e["shape"])]) + "\n"
            for e in entries))
    return directory


def read_dump(directory: Path) -> tuple:
    """-> (scenario name, batch size, {harness name: array in the harness's layout}); any inconsistency is a DumpError
    naming the file."""
    manifest = load_manifest(directory)
    return manifest["scenario"], manifest["batch_size"], _read_tensors(manifest)


def _read_tensors(manifest: dict) -> dict:
    trace = {}
    for entry in manifest["tensors"]:
        path, name = entry["path"], entry["name"]
        if not path.is_file():
            raise DumpError(f"{path}: listed for {name!r} in the manifest but missing")
        dtype = np.dtype(DTYPES[entry["dtype"]])
        expected = int(np.prod(entry["shape"], dtype=object)) * dtype.itemsize
        if path.stat().st_size != expected:
            raise DumpError(f"{path}: {path.stat().st_size} bytes, expected {expected} for {entry['dtype']} "
                            f"{entry['shape']}")
        data = path.read_bytes()
        if "sha256" in entry and hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise DumpError(f"{path}: checksum does not match the manifest (corrupted or rewritten)")
        array = np.frombuffer(data, dtype=dtype).reshape(entry["shape"]).astype(dtype.newbyteorder("="))
        if entry["dtype"] not in ("float32", "float64"):
            check_index_values(str(path), name, array)
        array = to_harness_layout(array, entry.get("layout"))
        trace[name] = array.astype(bool) if harness_name(name) in BOOLEAN_TENSORS else array
    return trace


def check_against_scenario(trace: dict, scenario, num_classes: int) -> None:
    """What only the scenario can bound: a label below the config's class count, a match below the number of
    ground-truth boxes of its image."""
    targets = scenario.targets()
    labels = trace.get("match.labels")
    if labels is not None and labels.size and int(labels.max()) >= num_classes:
        raise DumpError(f"match.labels: value {int(labels.max())}, expected a class below {num_classes} (the "
                        f"{scenario.config} config's count)")
    matched = trace.get("match.matched_idx")
    if matched is not None and matched.ndim == 2 and matched.shape[0] == len(targets):
        for image, (boxes, _) in enumerate(targets):
            if matched[image].size and int(matched[image].max()) >= len(boxes):
                raise DumpError(f"match.matched_idx: value {int(matched[image].max())} in image {image}, which has "
                                f"{len(boxes)} ground-truth boxes")


def load_dump_case(directory: Path) -> tuple:
    """A dump read and checked against its scenario: -> (Scenario, {name: array}, {harness name: port name} where
    the manifest maps them). A dump of an unknown scenario, with a label or match its scenario cannot have, or
    computed on other inputs is a DumpError."""
    from models.ssd300.reference.configs import get_config
    from models.ssd300.scenarios import load_scenarios

    from .dump_inputs import check_inputs

    directory = Path(directory)
    manifest = load_manifest(directory)
    trace = _read_tensors(manifest)
    try:
        scenario = load_scenarios(manifest["scenario"], [manifest["batch_size"]])[0]
    except ValueError as error:
        raise DumpError(f"{directory / 'manifest.json'}: field 'scenario': {error}") from None
    check_against_scenario(trace, scenario, get_config(scenario.config).num_classes)
    check_inputs(manifest.get("inputs"), scenario, directory / "manifest.json")
    port_names = {e["name"]: e["port_name"] for e in manifest["tensors"] if e["name"] != e["port_name"]}
    return scenario, trace, port_names

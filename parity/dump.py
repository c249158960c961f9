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
                 ...]}

Names are the harness's tensor names (README); dtype is one of float32, float64, int64, int32, uint8 (uint8 0/1
for mining.negatives). Any C program can write it with fwrite. `python -m parity compare --native-dump DIR`
compares a dump against the reference on the same scenario; the project's own native module goes through the
same path in tests/test_dump.py.
"""

import hashlib
import json
from pathlib import Path

import numpy as np

FORMAT = "ssd-parity-dump/1"
DTYPES = {"float32": "<f4", "float64": "<f8", "int64": "<i8", "int32": "<i4", "uint8": "u1"}
BOOLEAN_TENSORS = ("mining.negatives",)


def _file_name(name: str) -> str:
    return name.replace("/", "__") + ".bin"


def write_dump(directory: Path, scenario: str, batch_size: int, trace: dict) -> Path:
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
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return directory


def read_dump(directory: Path) -> tuple:
    """-> (scenario name, batch size, {name: array}); any inconsistency is a ValueError naming the file."""
    directory = Path(directory)
    manifest_path = directory / "manifest.json"
    if not manifest_path.is_file():
        raise ValueError(f"{manifest_path}: no manifest.json in the dump directory")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{manifest_path}: not valid JSON ({error})") from None
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{manifest_path}: format is {manifest.get('format')!r}, expected {FORMAT!r}")
    trace = {}
    for entry in manifest.get("tensors", []):
        path = directory / entry["file"]
        if entry.get("dtype") not in DTYPES:
            raise ValueError(f"{path}: dtype {entry.get('dtype')!r} is not one of {', '.join(DTYPES)}")
        if not path.is_file():
            raise ValueError(f"{path}: listed for {entry['name']!r} in the manifest but missing")
        data = path.read_bytes()
        dtype = np.dtype(DTYPES[entry["dtype"]])
        expected = int(np.prod(entry["shape"])) * dtype.itemsize
        if len(data) != expected:
            raise ValueError(f"{path}: {len(data)} bytes, expected {expected} for {entry['dtype']} {entry['shape']}")
        if "sha256" in entry and hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise ValueError(f"{path}: checksum does not match the manifest (corrupted or rewritten)")
        array = np.frombuffer(data, dtype=dtype).reshape(entry["shape"]).astype(dtype.newbyteorder("="))
        trace[entry["name"]] = array.astype(bool) if entry["name"] in BOOLEAN_TENSORS else array
    return manifest["scenario"], int(manifest["batch_size"]), trace

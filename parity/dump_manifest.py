"""A dump's manifest.json checked before any file is read: every field present and of its type, names unique, files
inside the dump directory, shapes sane, each dtype fitting its tensor's kind. Each problem is a DumpError whose
one line names the file and the field (the command line exits 2 on it)."""

import json
from pathlib import Path

import numpy as np

from .dump_layouts import LayoutError, check_layout

FORMAT = "ssd-parity-dump/1"
DTYPES = {"float32": "<f4", "float64": "<f8", "int64": "<i8", "int32": "<i4", "uint8": "u1"}
BOOLEAN_TENSORS = ("mining.negatives",)  # 0/1, read as bool
INDEX_TENSORS = ("match.matched_idx", "match.labels") + BOOLEAN_TENSORS
FLOAT_DTYPES = ("float32", "float64")
INDEX_DTYPES = ("int64", "int32", "uint8")
# The largest tensor a dump may declare: 2^34 bytes (16 GiB; a full SSD300 batch-8 map is about 0.3 GiB). A larger
# or overflowing shape is a mistake, not a tensor.
MAX_BYTES = 2 ** 34


class DumpError(ValueError):
    """A malformed dump: the message names the file and the field."""


def _field(where: str, entry: dict, key: str, kind: type, what: str):
    if key not in entry:
        raise DumpError(f"{where}: field {key!r} is missing (expected {what})")
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, kind):  # JSON's true is not a number here
        raise DumpError(f"{where}: field {key!r} is {value!r}, expected {what}")
    return value


def load_manifest(directory: Path) -> dict:
    """The manifest of the dump in `directory`, checked: {"scenario", "batch_size", "tensors": [entry]} and
    optionally "inputs" (the checksums of what it was computed on) and "names" (parity/dump_layouts.py); each entry's
    "path" resolved inside the directory, its "name" the harness's (the port's kept as "port_name")."""
    path = Path(directory) / "manifest.json"
    if not path.is_file():
        raise DumpError(f"{path}: no manifest.json in the dump directory")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DumpError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(manifest, dict):
        raise DumpError(f"{path}: the manifest is a {type(manifest).__name__}, expected an object")
    if manifest.get("format") != FORMAT:
        raise DumpError(f"{path}: field 'format' is {manifest.get('format')!r}, expected {FORMAT!r}")
    _field(str(path), manifest, "scenario", str, "a scenario name (fixtures/scenarios)")
    batch_size = _field(str(path), manifest, "batch_size", int, "a whole number >= 1")
    if batch_size < 1:
        raise DumpError(f"{path}: field 'batch_size' is {batch_size}, expected a whole number >= 1")
    inputs = manifest.get("inputs")
    if inputs is not None and not (isinstance(inputs, dict) and all(isinstance(v, str) for v in inputs.values())):
        raise DumpError(f"{path}: field 'inputs' is {inputs!r}, expected {{input name: sha256}} "
                        f"(parity/dump_inputs.py)")
    port_names = _name_map(path, manifest.get("names"))
    tensors = _field(str(path), manifest, "tensors", list, "a list of tensor entries")
    names, files = {}, set()  # harness name -> the port's
    root = Path(directory).resolve()
    for number, entry in enumerate(tensors):
        where = f"{path}: tensors[{number}]"
        if not isinstance(entry, dict):
            raise DumpError(f"{where} is {entry!r}, expected an object")
        port_name = _field(where, entry, "name", str, "a tensor name")
        where = f"{path}: tensor {port_name!r}"
        if not port_name:
            raise DumpError(f"{path}: tensors[{number}]: field 'name' is empty")
        name = _mapped(port_name, port_names)
        if name in names:
            through = {names[name], port_name} - {name}
            raise DumpError(f"{where} is listed twice" + (f" ({' and '.join(map(repr, sorted(through)))} as {name!r}, "
                                                          f"through 'names')" if through else ""))
        names[name] = port_name
        entry["name"], entry["port_name"] = name, port_name
        _check_dtype(where, name, _field(where, entry, "dtype", str, f"one of {', '.join(DTYPES)}"))
        _check_shape(where, entry["dtype"], _field(where, entry, "shape", list, "a list of whole numbers >= 0"))
        if "layout" in entry:
            try:
                check_layout(harness_name(name), _field(where, entry, "layout", str, "a layout name"), entry["shape"])
            except LayoutError as error:
                raise DumpError(f"{where}: {error}") from None
        file = _field(where, entry, "file", str, "a file name inside the dump directory")
        resolved = (root / file).resolve()
        if not resolved.is_relative_to(root) or resolved == root:
            raise DumpError(f"{where}: field 'file' is {file!r}, outside the dump directory (refused)")
        if resolved in files:
            raise DumpError(f"{where}: field 'file' is {file!r}, the file of another tensor too")
        files.add(resolved)
        if "sha256" in entry and not isinstance(entry["sha256"], str):
            raise DumpError(f"{where}: field 'sha256' is {entry['sha256']!r}, expected a hex digest")
        entry["path"] = resolved
    return manifest


ISOLATED = "isolated/"  # a port's output of one stage computed alone (parity/stage_files.py)


def _name_map(path: Path, names) -> dict:
    """The manifest's optional "names": {port name: harness name}, one port name per harness name."""
    if names is None:
        return {}
    if not isinstance(names, dict) or not all(isinstance(v, str) and v for v in names.values()):
        raise DumpError(f"{path}: field 'names' is {names!r}, expected {{port name: harness name}}")
    seen = {}
    for port, harness in names.items():
        if harness in seen:
            raise DumpError(f"{path}: field 'names' maps both {seen[harness]!r} and {port!r} to {harness!r}")
        seen[harness] = port
    return names


def _mapped(port_name: str, port_names: dict) -> str:
    """The harness's name of a port's tensor; an isolated stage's output keeps its prefix around the mapped name."""
    if port_name in port_names:
        return port_names[port_name]
    if port_name.startswith(ISOLATED) and harness_name(port_name) in port_names:
        return ISOLATED + port_names[harness_name(port_name)]
    return port_name


def harness_name(name: str) -> str:
    """The harness tensor a dump name holds: a port's isolated output of a stage is `isolated/<name>`."""
    return name.removeprefix(ISOLATED)


def _check_dtype(where: str, name: str, dtype: str) -> None:
    name = harness_name(name)
    if dtype not in DTYPES:
        raise DumpError(f"{where}: field 'dtype' is {dtype!r}, expected one of {', '.join(DTYPES)}")
    if name.startswith("relu_pass/"):  # a stage input (parity/stage_files.py): a mask
        name = "mining.negatives"
    if name in INDEX_TENSORS and dtype not in INDEX_DTYPES:
        raise DumpError(f"{where}: field 'dtype' is {dtype!r}, but an index tensor is one of {', '.join(INDEX_DTYPES)}")
    if name not in INDEX_TENSORS and dtype not in FLOAT_DTYPES:
        raise DumpError(f"{where}: field 'dtype' is {dtype!r}, but a float tensor is one of {', '.join(FLOAT_DTYPES)}")


def _check_shape(where: str, dtype: str, shape: list) -> None:
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise DumpError(f"{where}: field 'shape' is {shape!r}, expected a list of whole numbers >= 0")
    size = np.dtype(DTYPES[dtype]).itemsize
    for d in shape:  # in Python integers: no overflow on the way
        size *= d
    if size > MAX_BYTES:
        raise DumpError(f"{where}: field 'shape' is {shape!r}: {size} bytes, more than a dump tensor may hold "
                        f"({MAX_BYTES})")


def check_index_values(where: str, name: str, array: np.ndarray) -> None:
    """Index and boolean tensors hold what their meaning allows: 0/1 for a mask, -1 (background) or a GT index for a
    match, a class >= 0 for a label (dump.check_against_scenario bounds them above)."""
    name = harness_name(name)
    if not array.size:
        return
    low, high = int(array.min()), int(array.max())
    if name in BOOLEAN_TENSORS and (low < 0 or high > 1):
        raise DumpError(f"{where}: values {low}..{high}, expected 0 or 1 (a mask)")
    if name == "match.matched_idx" and low < -1:
        raise DumpError(f"{where}: value {low}, expected -1 (background) or a ground-truth index >= 0")
    if name == "match.labels" and low < 0:
        raise DumpError(f"{where}: value {low}, expected a class index >= 0")

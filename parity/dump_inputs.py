"""A scenario's inputs, exported for a port in any language: what it needs to compute the step the harness
compares (python -m parity inputs).

DIR/manifest.json   {"format": "ssd-parity-inputs/1", "scenario", "batch_size", "steps", "sgd", "config",
                     "tensors": [{"name", "file", "dtype", "shape", "sha256"}]}
DIR/index.txt       the same list for C, one tensor a line: name dtype file rank d0 d1 ... (native/include/parity_dump.h)
DIR/<file> ...      raw little-endian values, C order, as in a dump (parity/dump.py)
DIR/inputs.safetensors  the same tensors

Tensors: `images` (B,3,300,300) float32, normalized as torchvision's SSD transform does; `boxes/<i>` (n,4) float32
xyxy pixels and `labels/<i>` (n,) int64 per image (n may be 0); `weights/<state_dict key>` float32, every parameter.
A dump names the inputs it was computed on by their checksums ("inputs": {name: sha256}); compare refuses a dump
whose inputs differ from its scenario's, naming them.
"""

import hashlib
import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from models.ssd300.scenarios import Scenario

from .dump_manifest import DumpError

FORMAT = "ssd-parity-inputs/1"
DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.int64): "int64"}


def scenario_inputs(scenario: Scenario) -> dict:
    """name -> array, in the order a port reads them."""
    from models.ssd300.reference.model import state_dict_arrays
    from models.ssd300.sides import reference_model_for

    inputs = {"images": scenario.images()}
    for i, (boxes, labels) in enumerate(scenario.targets()):
        inputs[f"boxes/{i}"] = np.ascontiguousarray(boxes, dtype=np.float32).reshape(-1, 4)
        inputs[f"labels/{i}"] = np.ascontiguousarray(labels, dtype=np.int64)
    for key, value in state_dict_arrays(reference_model_for(scenario)).items():
        inputs[f"weights/{key}"] = np.ascontiguousarray(value, dtype=np.float32)
    return inputs


def _bytes(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def checksums(inputs: dict) -> dict:
    """name -> sha256 of its raw little-endian bytes."""
    return {name: hashlib.sha256(_bytes(array)).hexdigest() for name, array in inputs.items()}


def write_inputs(directory: Path, scenario: Scenario) -> Path:
    from .train import TrainSettings

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    inputs = scenario_inputs(scenario)
    entries, lines = [], []
    for name, array in inputs.items():
        file = name.replace("/", "__") + ".bin"
        data = _bytes(array)
        (directory / file).write_bytes(data)
        dtype = DTYPES[array.dtype]
        entries.append({"name": name, "file": file, "dtype": dtype, "shape": list(array.shape),
                        "sha256": hashlib.sha256(data).hexdigest()})
        lines.append(" ".join([name, dtype, file, str(array.ndim), *map(str, array.shape)]))
    settings = TrainSettings()
    manifest = {"format": FORMAT, "scenario": scenario.name, "config": scenario.config,
                "batch_size": scenario.batch_size,
                "steps": scenario.steps,  # training steps back to back on the batch, no update between (a step dump)
                "sgd": {"lr": settings.lr, "momentum": settings.momentum, "weight_decay": settings.weight_decay,
                        "used_by": "python -m parity train; a step dump runs no update"},
                "tensors": entries}
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1))
    (directory / "index.txt").write_text("\n".join(lines) + "\n")
    save_file({name: np.ascontiguousarray(a) for name, a in inputs.items()}, str(directory / "inputs.safetensors"))
    return directory


def check_inputs(declared: dict | None, scenario: Scenario, manifest_path: Path) -> None:
    """A dump that names its inputs must have been computed on this scenario's: else a DumpError naming those
    that differ. A dump that does not name them is taken at its word."""
    if declared is None:
        return
    expected = checksums(scenario_inputs(scenario))
    differ = sorted(name for name in declared if declared[name] != expected.get(name))  # a port may read a subset
    if differ:
        shown = ", ".join(differ[:5]) + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
        raise DumpError(f"{manifest_path}: field 'inputs': the dump was computed on other inputs than "
                        f"{scenario.id}'s: {shown} differ (python -m parity inputs writes the scenario's)")

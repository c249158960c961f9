"""Golden traces: the native module checked without torch, fixtures verified by checksum before they are read,
and regeneration that refuses silent drift."""

import hashlib
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from parity.golden import GOLDEN_DIR, load, regenerate

TORCH_FREE = """
import sys
sys.modules["torch"] = None  # any import of torch now fails
import ssd_native
from parity.golden import check_native
ssd_native.set_faults(sys.argv[1:])
failures = check_native()
print("\\n".join(failures))
sys.exit(1 if failures else 0)
"""


def _torch_free_check(*faults):
    return subprocess.run([sys.executable, "-c", TORCH_FREE, *faults], capture_output=True, text=True, timeout=300)


def test_native_passes_the_golden_check_without_torch():
    run = _torch_free_check()
    assert run.returncode == 0, run.stdout + run.stderr


def test_golden_check_without_torch_catches_a_fault():
    run = _torch_free_check("swapped_variances")
    assert run.returncode == 1 and run.stdout.startswith("targets.loc: largest error"), run.stdout + run.stderr


@pytest.fixture
def golden_copy(tmp_path):
    copy = tmp_path / "golden"
    shutil.copytree(GOLDEN_DIR, copy)
    return copy


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_damaged_golden_file_is_named(golden_copy, damage):
    path = golden_copy / "reference.safetensors"
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(bytes(data[:1000]))
    else:
        path.unlink()
    with pytest.raises(ValueError, match=rf"golden file {path} (does not match its sha256|is missing)"):
        load(golden_copy)


def test_unreadable_manifest_is_named(golden_copy):
    (golden_copy / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match="golden manifest .*manifest.json is missing or unreadable"):
        load(golden_copy)


def test_regeneration_refuses_drift_unless_forced(golden_copy):
    """Committed content that the generator no longer produces is reported, and kept unless forced."""
    # First the files as this machine generates them: the reference's float32 roundings follow the CPU's oneDNN
    # kernels (AVX2 or AVX-512), so files made on another CPU kind differ here in the last bits of many tensors.
    regenerate(golden_copy, force=True)
    generated = load(golden_copy)[2]["conf_head"]
    path = golden_copy / "reference.safetensors"
    tensors = load_file(str(path))
    tensors["conf_head"][0, 0, 0] += 1.0
    save_file(tensors, str(path))
    manifest = json.loads((golden_copy / "manifest.json").read_text())
    manifest["sha256"]["reference.safetensors"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (golden_copy / "manifest.json").write_text(json.dumps(manifest))
    drifted = path.read_bytes()

    assert regenerate(golden_copy, force=False) == ["reference:conf_head"]
    assert path.read_bytes() == drifted
    assert regenerate(golden_copy, force=True) == ["reference:conf_head"]
    assert np.array_equal(load(golden_copy)[2]["conf_head"], generated)

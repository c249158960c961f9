"""Golden traces: the reference's values for one scenario, stored so the native module can be checked without
torch (a machine without it, or the native module under a sanitizer, where torch cannot run).

fixtures/golden/ holds, for the narrow scenario at batch 1:
- weights.safetensors: the seeded reference weights the native model is built from;
- reference.safetensors: the reference float32 values of the network outputs, the loss tensors and a set of
  parameter gradients (reconciled at the native's near-ties, as in a parity run);
- manifest.json: the sha256 of both files, verified before either is read, and for each tensor the bound it is
  judged by, derived from the float64 oracle when the fixture was made.
Only safetensors and JSON: nothing is unpickled, nothing goes through torch.load.

A native value passes when |native - reference| <= bound + the reference's own error against the oracle (the
oracle bound, moved by the triangle inequality onto the stored reference); indices are exact, negatives up to
ties at the selection boundary. `make fixtures` regenerates the files and refuses to overwrite them when the
content changed, unless given --force-regen. The reference's float32 roundings follow the CPU's oneDNN kernels
(AVX2 or AVX-512): regenerated on another CPU kind, many tensors differ in their last bits and are reported as changed.
"""

import hashlib
import json
import tempfile
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from models.ssd300.rules import RULES
from models.ssd300.scenarios import load_scenarios

from .core.index_compare import compare_exact, compare_selection

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "golden"
SCENARIO, BATCH_SIZE = "narrow", 1
FILES = ("weights.safetensors", "reference.safetensors")
TENSORS = [
    "loc_head", "conf_head", "priors", "match.matched_idx", "match.labels", "targets.loc", "loss.cls_per_prior",
    "mining.negatives", "loss.loc", "loss.conf", "loss.total",
    "param_grad/backbone.features.0.weight", "param_grad/backbone.features.0.bias", "param_grad/backbone.scale_weight",
    "param_grad/backbone.extra.1.2.bias", "param_grad/head.regression_head.module_list.5.weight",
    "param_grad/head.classification_head.module_list.0.bias",
]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def generate(directory: Path) -> Path:
    """Run the scenario on every side (needs torch) and write the three golden files into `directory`."""
    from models.ssd300.reference.model import state_dict_arrays
    from models.ssd300.sides import reference_model, run_sides

    from .core.compare import compare_traces

    scenario = load_scenarios(SCENARIO, [BATCH_SIZE])[0]
    traces = run_sides(scenario)
    # The golden check holds native values to the reference's by one number per tensor: the older rule's
    # (tolerance.oracle_bound, a multiple of the reference's own error), not the error model's per-element bounds.
    results = {r.name: r for r in compare_traces(RULES, scenario.id, scenario.batch_size, traces.native, traces.reference,
                                                 traces.oracle, traces.native64, traces.strict_oracle,
                                                 traces.routing_ties)}
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(state_dict_arrays(reference_model(scenario.config, scenario.weights_seed, "float32")),
              str(directory / FILES[0]))
    save_file({name: np.ascontiguousarray(traces.reference[name]) for name in TENSORS}, str(directory / FILES[1]))
    bounds = {}
    for name in TENSORS:
        bound = results[name].bound
        bounds[name] = {"value": bound.get("value"), "reference_error": bound.get("reference_error"),
                        "derivation": bound.get("derivation")}
    manifest = {"format": "ssd-parity-golden/1", "scenario": SCENARIO, "batch_size": BATCH_SIZE,
                "sha256": {name: _sha256(directory / name) for name in FILES}, "bounds": bounds}
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return directory


def load(directory: Path = GOLDEN_DIR) -> tuple:
    """-> (manifest, weights, reference tensors); a missing, truncated or altered file is a ValueError naming it."""
    directory = Path(directory)
    manifest_path = directory / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
        expected = manifest["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"golden manifest {manifest_path} is missing or unreadable: {error}") from None
    for name in FILES:
        path = directory / name
        if not path.is_file():
            raise ValueError(f"golden file {path} is missing")
        if name not in expected or _sha256(path) != expected[name]:
            raise ValueError(f"golden file {path} does not match its sha256 in {manifest_path} (corrupted, "
                             "truncated or edited; regenerate with `make fixtures`)")
    return manifest, load_file(str(directory / FILES[0])), load_file(str(directory / FILES[1]))


def check_native(directory: Path = GOLDEN_DIR) -> list:
    """The native module against the golden reference, without torch: -> one line per failing tensor."""
    import ssd_native

    manifest, weights, golden = load(directory)
    scenario = load_scenarios(manifest["scenario"], [manifest["batch_size"]])[0]
    targets = scenario.targets()
    native = ssd_native.ModelFloat32(weights).forward_backward(scenario.images(), [b for b, _ in targets],
                                                                [l for _, l in targets])
    failures = []
    for name in manifest["bounds"]:  # execution order (the file itself is sorted by name)
        reference = golden[name]
        if name not in native:
            failures.append(f"{name}: not produced by the native module")
            continue
        value, bound = native[name], manifest["bounds"][name]
        if name == "mining.negatives":
            loss_bound = manifest["bounds"]["loss.cls_per_prior"]
            diff = compare_selection(RULES, name, value, reference, golden["loss.cls_per_prior"],
                                     native["loss.cls_per_prior"], golden["match.labels"], loss_bound["value"] + loss_bound["reference_error"])
            failures += [f"{name}: {reason}" for reason in diff.reasons]
        elif value.dtype.kind in "biu":
            failures += [f"{name}: {reason}" for reason in compare_exact(RULES, name, value, reference).reasons]
        else:
            allowed = bound["value"] + (bound["reference_error"] or 0.0)
            error = float(np.max(np.abs(value.astype(np.float64) - reference), initial=0.0))
            if not error <= allowed:
                failures.append(f"{name}: largest error {error:.3g} against the golden reference, allowed {allowed:.3g}"
                                f" ({bound['derivation']} + the reference's own error)")
    return failures


def regenerate(directory: Path = GOLDEN_DIR, force: bool = False) -> list:
    """Regenerate the golden files; -> the tensors (or weights) whose content changed. Without force, a change
    leaves the committed files as they are (the caller reports it and fails)."""
    with tempfile.TemporaryDirectory() as scratch:
        fresh = generate(Path(scratch))
        changed = []
        if (Path(directory) / "manifest.json").is_file():
            _, old_weights, old_reference = load(directory)
            _, new_weights, new_reference = load(fresh)
            for label, old, new in (("weights", old_weights, new_weights), ("reference", old_reference, new_reference)):
                for name in sorted(set(old) | set(new)):
                    if name not in old or name not in new or not np.array_equal(old[name], new[name]):
                        changed.append(f"{label}:{name}")
        else:
            changed.append("(no golden files yet)")
        if force or changed == ["(no golden files yet)"] or not changed:
            Path(directory).mkdir(parents=True, exist_ok=True)
            for name in (*FILES, "manifest.json"):
                (Path(directory) / name).write_bytes((fresh / name).read_bytes())
        return changed

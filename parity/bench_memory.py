"""Peak resident memory of one side's training step, measured in a fresh process so that neither side's memory
(nor the other library's import) counts against the other.

    python -m parity.bench_memory native|torch BATCH_SIZE INPUTS.safetensors

INPUTS holds the weights (state_dict keys) and the batch (`batch.images`, `batch.boxes.<i>`, `batch.labels.<i>`),
written by parity/bench.py. The native side never imports torch. Prints one JSON line: the resident memory before
the step, the peak during it (the kernel's high-water mark, reset just before), and their difference, in MB.
"""

import json
import sys
from pathlib import Path

from safetensors.numpy import load_file

from .bench import SGD, Sides  # bench imports torch only inside the functions that need it


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident size


def _split(arrays: dict, batch_size: int) -> tuple:
    weights = {k: v for k, v in arrays.items() if not k.startswith("batch.")}
    boxes = [arrays[f"batch.boxes.{i}"] for i in range(batch_size)]
    labels = [arrays[f"batch.labels.{i}"] for i in range(batch_size)]
    return weights, arrays["batch.images"], boxes, labels


def native_step(weights: dict, images, boxes, labels):
    import ssd_native

    model = ssd_native.ModelFloat32(weights)
    del weights
    return lambda: model.train_step(images, boxes, labels, **SGD)


def torch_step(weights: dict, images, boxes, labels):
    import torch

    from models.ssd300.reference.configs import get_config
    from models.ssd300.reference.model import build_reference

    sides = Sides.__new__(Sides)
    scenario = Sides.scenario(len(images))
    sides.torch_model = build_reference(get_config(scenario.config), scenario.weights_seed, torch.float32)
    sides.torch_model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    sides.optimizer = torch.optim.SGD(sides.torch_model.parameters(), **SGD)
    del weights
    return sides.torch_step((images, boxes, labels))


def main(argv: list) -> int:
    side, batch_size, inputs = argv[0], int(argv[1]), argv[2]
    weights, images, boxes, labels = _split(load_file(inputs), batch_size)
    step = (native_step if side == "native" else torch_step)(weights, images, boxes, labels)
    before = _status_mb("VmRSS")
    _reset_peak()
    step()
    peak = _status_mb("VmHWM")
    print(json.dumps({"side": side, "batch_size": batch_size, "rss_before_mb": before, "peak_rss_mb": peak,
                      "step_peak_increase_mb": peak - before}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

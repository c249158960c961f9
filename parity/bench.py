"""`make bench`: the native SSD300 against PyTorch on the same cores and the same thread count, in one run.

Every time is kept for each of repeated runs after a warm-up run, the two sides' runs alternating (and the training
steps of every batch size in the same rounds), and every verdict is a ratio between numbers measured in this run,
never an absolute time: these machines are shared and noisy. A time verdict is the median of the rounds' own ratios
(one call of each per round), printed with their range and the ratio of minima (targets() says why the median).
The process keeps freed memory for the next allocation (parity/core/heap.py, as in every harness run), so no warm step
pays the kernel to fault its pages in again: the page faults of every timed call are recorded beside its time to
show it.

- the training step (forward, MultiBox loss, backward, SGD update) of SSD300 at batch 1 and 4, and forward alone
  at batch 1 (native: what a deployed model returns, the head outputs; PyTorch: backbone + head, no hooks);
- peak resident memory of each side for the batch-4 step, each side in a fresh process of its own;
- time per image at batch 1 and 4, both sides, every timed call training on 4 images (4 steps of batch 1, 1 of
  batch 4), with one batch-1 step per call beside it as the control; FULL: batch 1, 2, 4 and 8 on 8 images a call;
- FULL only: every convolution of SSD300 at batch 1, forward and backward, with GFLOP/s beside the machine's sgemm
  rate (numpy's OpenBLAS on a conv-shaped GEMM, measured here);
- the harness: the whole parity run of SSD300 at batch 4 (four sides with every tap, the tie replays, every
  comparison, the isolated replays, the report) against the bare training steps of the same four sides, first run
  against first calls, then (FULL) the minimum of later runs against the steps' minimum, the two timed in
  alternating rounds (harness_overhead).
"""

import datetime
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

DEFAULT_OUTPUT = Path("reports/bench.json")
SCENARIO = "default"  # the full SSD300, 21 classes
SGD = dict(lr=1e-3, momentum=0.9, weight_decay=5e-4)
FORWARD_RUNS_PER_REPEAT = 5
HARNESS_TARGET = 1.3  # a parity run at batch 4 over the bare steps of its four sides, error-model bounds included


@dataclass(frozen=True)
class Profile:
    """What one bench run measures."""

    name: str
    repeats: int  # rounds after a warm-up
    batches: tuple  # the training step's batch sizes, timed in the same rounds; per image: the largest over 1
    # Every timed call of the training step trains on this many images (e.g. 8 steps of batch 1, ..., 1 of batch 8),
    # so that time per image at each batch size is measured over calls of the same length: one step per call read
    # batch 1 faster than batch-1 steps back to back run (measured: docs/bench.md), and stays beside it as the control.
    images_per_call: int
    layers: bool  # every convolution of SSD300 timed alone, forward and backward
    harness_rounds: int  # rounds of the parity run after its first (a parity run takes a minute or more)


# `make bench`: every verdict, in about 7 minutes on 2 cores; `make bench FULL=1`: batch 2 and 8, every layer, more
# rounds (about 27 minutes).
DEFAULT = Profile("default", repeats=3, batches=(1, 4), images_per_call=4, layers=False, harness_rounds=0)
FULL = Profile("full", repeats=5, batches=(1, 2, 4, 8), images_per_call=8, layers=True, harness_rounds=2)


@dataclass
class Timing:
    times_s: list[float]  # every timed run, in order
    first_s: float | None = None  # the untimed warm-up call's time, kept where a first run is compared (harness)
    page_faults: list[int] = field(default_factory=list)  # minor page faults of the process during each timed run

    @property
    def min_s(self) -> float:
        return min(self.times_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    def per_step(self, steps: int) -> "Timing":
        """The times of calls of `steps` steps each, as times per step."""
        return Timing([t / steps for t in self.times_s], None if self.first_s is None else self.first_s / steps,
                      [f / steps for f in self.page_faults])

    def as_dict(self) -> dict:
        return {"min_s": self.min_s, "median_s": self.median_s, "runs": len(self.times_s), "first_s": self.first_s,
                "times_s": self.times_s, "page_faults": self.page_faults}


def _seconds(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def _timed_call(function) -> tuple:
    """-> (seconds, minor page faults of the process during the call)."""
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    seconds = _seconds(function)
    return seconds, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults


def _timing(calls: list, first_s: float | None = None) -> Timing:
    return Timing([seconds for seconds, _ in calls], first_s, [faults for _, faults in calls])


def timed(function, repeats: int) -> Timing:
    """One warm-up call, then `repeats` timed calls."""
    function()
    return _timing([_timed_call(function) for _ in range(repeats)])


def timed_rounds(functions: dict, repeats: int) -> dict:
    """-> {key: Timing}: one warm-up call of each function, then `repeats` rounds that each time one call of every
    function back to back, so that all of them sample the same stretches of a shared machine's load (timing one
    side's runs, then the other's, let a slow spell land on one side only: forward ratios of 1.10 and 1.40 in two
    runs of the same code)."""
    first = {key: _seconds(function) for key, function in functions.items()}
    calls = {key: [] for key in functions}
    for _ in range(repeats):
        for key, function in functions.items():
            calls[key].append(_timed_call(function))
    return {key: _timing(c, first[key]) for key, c in calls.items()}


def consecutive(step, count: int):
    """A call of `count` steps in a row."""
    def run():
        for _ in range(count):
            step()
    return run


def timed_pair(native, torch_side, repeats: int) -> dict:
    """-> {"native": Timing, "torch": Timing}, the two sides' calls alternating (timed_rounds)."""
    return timed_rounds({"native": native, "torch": torch_side}, repeats)


def ratio(native: Timing, torch_side: Timing) -> float:
    return native.min_s / torch_side.min_s


def round_ratios(numerator_s: list, denominator_s: list) -> dict:
    """The ratio of each round's two calls (timed_rounds): their median is a time verdict (targets), their range
    shows how far it sits from the machine's noise."""
    per_round = [n / d for n, d in zip(numerator_s, denominator_s, strict=True)]
    return {"median": statistics.median(per_round), "min": min(per_round), "max": max(per_round)}


def timed_pair_result(pair: dict) -> dict:
    """A timed_pair for the JSON: each side's timing, the ratio of minima and the per-round ratios."""
    native, torch_side = pair["native"], pair["torch"]
    return ({side: timing.as_dict() for side, timing in pair.items()}
            | {"ratio": ratio(native, torch_side), "round_ratios": round_ratios(native.times_s, torch_side.times_s)})


class Sides:
    """The native model and the PyTorch model on the same weights, with bare (tap-free) steps."""

    def __init__(self, dtype=np.float32):
        import torch

        from models.ssd300.reference.configs import get_config
        from models.ssd300.reference.model import build_reference, state_dict_arrays
        from models.ssd300.sides import NATIVE_MODELS, TORCH_DTYPES

        scenario = self.scenario(1)
        self.torch_model = build_reference(get_config(scenario.config), scenario.weights_seed, TORCH_DTYPES[np.dtype(dtype)])
        self.native_model = NATIVE_MODELS[np.dtype(dtype)](state_dict_arrays(self.torch_model))
        self.optimizer = torch.optim.SGD(self.torch_model.parameters(), **SGD)
        self.dtype = dtype

    @staticmethod
    def scenario(batch_size: int):
        from models.ssd300.scenarios import load_scenarios

        return load_scenarios(SCENARIO, [batch_size])[0]

    def inputs(self, batch_size: int) -> tuple:
        scenario = self.scenario(batch_size)
        images = scenario.images().astype(self.dtype)
        targets = scenario.targets()
        return images, [b.astype(self.dtype) for b, _ in targets], [l for _, l in targets]

    def native_step(self, batch: tuple):
        return lambda: self.native_model.train_step(*batch, **SGD)

    def native_forward(self, batch: tuple):
        return lambda: self.native_model.forward(batch[0], all_taps=False)

    def torch_forward(self, batch: tuple):
        import torch

        images = torch.from_numpy(batch[0])

        def run():
            with torch.no_grad():
                self.torch_model.head(list(self.torch_model.backbone(images).values()))
        return run

    def torch_step(self, batch: tuple):
        import torch
        from torchvision.models.detection.image_list import ImageList

        from models.ssd300.reference.loss import run_loss

        model, images = self.torch_model, torch.from_numpy(batch[0])
        boxes = [torch.from_numpy(b) for b in batch[1]]
        labels = [torch.from_numpy(l) for l in batch[2]]
        size = images.shape[-1]

        def run():
            self.optimizer.zero_grad(set_to_none=True)
            features = list(model.backbone(images).values())
            head = model.head(features)
            priors = model.anchor_generator(ImageList(images, [(size, size)] * images.shape[0]), features)[0]
            losses = run_loss(model, head["bbox_regression"], head["cls_logits"], priors, boxes, labels)
            losses["loss.total"].backward()
            self.optimizer.step()
        return run


def sgemm_rate(repeats: int) -> dict:
    """numpy's OpenBLAS sgemm on the conv3_x GEMM shape (256 x 2304 x 5625): the machine's reachable GEMM rate."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 2304), dtype=np.float32)
    b = rng.standard_normal((2304, 5625), dtype=np.float32)
    t = timed(lambda: a @ b, repeats)
    return {"shape": [256, 2304, 5625], "gflops": 2 * 256 * 2304 * 5625 / t.min_s / 1e9, **t.as_dict()}


def conv_layers(sides: Sides) -> list:
    """Every Conv2d of the reference with the input it sees at batch 1: (name, module, input array)."""
    import torch

    found = []
    hooks = [m.register_forward_hook(lambda m, i, o, name=name: found.append((name, m, i[0].detach().numpy().copy())))
             for name, m in sides.torch_model.named_modules() if isinstance(m, torch.nn.Conv2d)]
    try:
        sides.torch_forward(sides.inputs(1))()
    finally:
        for hook in hooks:
            hook.remove()
    return found


def layer_rows(sides: Sides, repeats: int) -> list:
    import ssd_native
    import torch

    rows = []
    for name, conv, x in conv_layers(sides):
        w = conv.weight.detach().numpy()
        b = conv.bias.detach().numpy()
        (stride, _), (pad, _), (dil, _) = conv.stride, conv.padding, conv.dilation
        out = torch.nn.functional.conv2d(torch.from_numpy(x), conv.weight, conv.bias, stride, pad, dil)
        dout = np.random.default_rng(0).standard_normal(out.shape).astype(np.float32)
        flops = 2.0 * out.numel() * w.shape[1] * w.shape[2] * w.shape[3]
        tx, tw, tb, tdout = (torch.from_numpy(a) for a in (x, w, b, dout))
        forward = timed_pair(lambda: ssd_native.conv2d_float32(x, w, b, stride=stride, pad=pad, dilation=dil),
                             lambda: torch.nn.functional.conv2d(tx, tw, tb, stride, pad, dil), repeats)
        backward = timed_pair(
            lambda: ssd_native.conv2d_backward_float32(dout, x, w, stride=stride, pad=pad, dilation=dil),
            lambda: torch.ops.aten.convolution_backward(tdout, tx, tw, [tw.shape[0]], [stride] * 2, [pad] * 2,
                                                        [dil] * 2, False, [0, 0], 1, [True, True, True]),
            repeats)
        native_fwd, torch_fwd = forward["native"], forward["torch"]
        native_bwd, torch_bwd = backward["native"], backward["torch"]
        rows.append({
            "layer": name, "input": list(x.shape), "weight": list(w.shape), "stride": stride, "pad": pad,
            "dilation": dil, "forward_gflop": flops / 1e9,
            "native_forward": native_fwd.as_dict(), "torch_forward": torch_fwd.as_dict(),
            "native_backward": native_bwd.as_dict(), "torch_backward": torch_bwd.as_dict(),
            "native_forward_gflops": flops / native_fwd.min_s / 1e9, "torch_forward_gflops": flops / torch_fwd.min_s / 1e9,
            "native_backward_gflops": 2 * flops / native_bwd.min_s / 1e9,
            "torch_backward_gflops": 2 * flops / torch_bwd.min_s / 1e9,
        })
    return rows


def step_memory(sides: Sides, batch_size: int) -> dict:
    """Peak resident memory of each side's first training step, each in a fresh process (parity/bench_memory.py)."""
    from safetensors.numpy import save_file

    from models.ssd300.reference.model import state_dict_arrays

    images, boxes, labels = sides.inputs(batch_size)
    arrays = dict(state_dict_arrays(sides.torch_model), **{"batch.images": images})
    arrays.update({f"batch.boxes.{i}": b for i, b in enumerate(boxes)})
    arrays.update({f"batch.labels.{i}": l for i, l in enumerate(labels)})
    measured = {}
    with tempfile.TemporaryDirectory() as directory:
        inputs = Path(directory) / "inputs.safetensors"
        save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(inputs))
        for side in ("native", "torch"):
            run = subprocess.run([sys.executable, "-m", "parity.bench_memory", side, str(batch_size), str(inputs)],
                                 capture_output=True, text=True, check=False)
            if run.returncode != 0:
                raise RuntimeError(f"memory measurement of the {side} side failed:\n{run.stderr[-2000:]}")
            measured[side] = json.loads(run.stdout.strip().splitlines()[-1])
    return measured


def harness_overhead(rounds: int) -> dict:
    """The whole parity run of SSD300 at batch 4 against the bare steps of the four sides it compares, like for
    like: the first parity run against the bare steps' first calls, then `rounds` rounds that each time one bare
    step of every side and one parity run, the minimum parity run against the sum of the sides' minimum steps.
    A first run in a process pays for faulting in its memory (2.7 s per GB on this project's VMs, parity/core/heap.py),
    and the parity run holds several GB more than a bare step; the verdict takes the larger ratio. Rounds alternate
    the two so that both sample the same stretch of a shared machine's load: a single parity run against the
    minimum of the steps measured minutes earlier read 1.30 and 1.59 in two benches of the same code.
    Like for like, too: the bare steps' models are built before their first calls are timed, so the parity run's
    four models are built before its first run (the build is reported, not held to either side)."""
    from .core.heap import release_memory

    models_s = _seconds(_parity_models)
    sides = [Sides(dtype) for dtype in (np.float32, np.float64)]
    bare = []  # the four bare steps: native and PyTorch, float32 and float64
    for side in sides:
        batch = side.inputs(4)
        bare += [side.native_step(batch), side.torch_step(batch)]
    # The first calls start from handed-back memory and then share the heap, as the sides of the first parity run do.
    release_memory()
    bare_first = sum(_seconds(step) for step in bare)
    release_memory()
    harness_first = _seconds(_parity_run)
    bare_times, harness_times = [[] for _ in bare], []
    for _ in range(rounds):
        for times, step in zip(bare_times, bare):
            times.append(_seconds(step))
        harness_times.append(_seconds(_parity_run))
    del sides, bare
    release_memory()
    first_ratio = harness_first / bare_first
    if not rounds:  # the default bench: the first run alone (a parity run at batch 4 takes over two minutes)
        return {"harness_first_s": harness_first, "bare_four_sides_first_s": bare_first, "first_ratio": first_ratio,
                "harness_runs_s": [], "rounds": 0, "models_build_s": models_s, "ratio": first_ratio}
    bare_warm, harness_warm = sum(min(times) for times in bare_times), min(harness_times)
    warm_ratio = harness_warm / bare_warm
    return {"harness_first_s": harness_first, "bare_four_sides_first_s": bare_first, "first_ratio": first_ratio,
            "harness_warm_s": harness_warm, "bare_four_sides_s": bare_warm, "warm_ratio": warm_ratio,
            "harness_runs_s": harness_times, "rounds": rounds, "models_build_s": models_s,
            "ratio": max(first_ratio, warm_ratio)}


def _parity_models() -> None:
    """The parity run's float32 models (reference and native), built once and kept (models/ssd300/sides.py). The
    float64 ones are built afresh by every run (0.2 s for SSD300), which the harness's time includes."""
    from models.ssd300.sides import native_model_for

    native_model_for(Sides.scenario(4))  # with the reference it is built from


def _parity_run() -> None:
    """Every side of the default scenario at batch 4 with all taps, every comparison, the report."""
    from models.ssd300.case import run_case

    from .core.report import build_report, write_report

    results = run_case(Sides.scenario(4))
    with tempfile.TemporaryDirectory() as directory:
        write_report(build_report(results), Path(directory) / "bench-parity.json")


def timed_steps(sides: Sides, profile: Profile) -> tuple:
    """-> ({batch: {side: Timing per step}}, {side: Timing}): the training steps of every batch size and both sides,
    the profile's images_per_call images' steps per call, in the same rounds (time per image at the largest batch and
    at batch 1 sample the same stretches of the machine's load, as the two sides do); and the control, one batch-1
    step per call."""
    functions, steps_per_call = {}, {}
    for batch_size in profile.batches:
        batch = sides.inputs(batch_size)
        for side, step in (("native", sides.native_step(batch)), ("torch", sides.torch_step(batch))):
            steps_per_call[batch_size, side] = profile.images_per_call // batch_size
            functions[batch_size, side] = consecutive(step, steps_per_call[batch_size, side])
            if batch_size == 1:
                functions["one step", side] = step
    timings = timed_rounds(functions, profile.repeats)
    steps = {b: {side: timings[b, side].per_step(steps_per_call[b, side]) for side in ("native", "torch")}
             for b in profile.batches}
    return steps, {side: timings["one step", side] for side in ("native", "torch")}


def code_version() -> str:
    """The commit measured (with "-dirty" if the tree had changes), or "unknown" outside a git checkout."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=40"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(profile: Profile, threads: int, output: Path, console) -> int:
    import ssd_native
    import torch

    from .machine import machine_facts

    torch.set_num_threads(threads)
    ssd_native.set_num_threads(threads)
    started = time.perf_counter()
    repeats = profile.repeats
    result = {"machine": machine_facts(), "commit": code_version(), "profile": asdict(profile), "threads": threads,
              "torch": torch.__version__, "repeats": repeats,
              "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    console.print(f"{result['machine']['cpu']}, {result['machine']['isa']}, {result['machine']['cores']} cores; "
                  f"threads: {threads} (torch and native); the {profile.name} bench, {repeats} rounds after a warm-up")

    result["sgemm"] = sgemm_rate(repeats)
    sides = Sides()
    steps, one_step_calls = timed_steps(sides, profile)
    for batch_size, pair in steps.items():
        console.print(f"training step B{batch_size}: native {pair['native'].min_s:.3f} s, "
                      f"PyTorch {pair['torch'].min_s:.3f} s")
    batch1 = sides.inputs(1)
    # A forward is a tenth of a step: 5x the runs, so that its rounds sample a longer stretch of the machine's
    # load (the same code read 1.03 here with 3 runs, 0.91-0.98 in four runs of 15 alternating calls just after).
    forward = timed_pair(sides.native_forward(batch1), sides.torch_forward(batch1), FORWARD_RUNS_PER_REPEAT * repeats)
    result["step"] = {f"B{b}": timed_pair_result(s) for b, s in steps.items()}
    result["forward_B1"] = timed_pair_result(forward)
    result["per_image"] = {f"B{b}": {k: t.min_s / b for k, t in s.items()} for b, s in steps.items()}
    result["B1_one_step_per_call"] = {side: timing.as_dict() for side, timing in one_step_calls.items()}
    result["page_faults_per_step"] = {f"B{b}": {k: statistics.median(t.page_faults) for k, t in s.items()}
                                      for b, s in steps.items()}
    result["layers"] = layer_rows(sides, repeats) if profile.layers else []
    result["memory_B4"] = step_memory(sides, 4)
    del sides
    result["harness_B4"] = harness_overhead(profile.harness_rounds)
    output.parent.mkdir(parents=True, exist_ok=True)
    result["targets"] = targets(result)
    result["bench_minutes"] = (time.perf_counter() - started) / 60
    output.write_text(json.dumps(result, indent=1))
    return print_result(result, console, output)


def largest_batch(step: dict) -> int:
    return max(int(key[1:]) for key in step)


def per_image_round_ratios(step: dict, side: str, batch1_times_s: list | None = None) -> dict:
    """Each round's time per image at the largest batch over the same round's at batch 1 (the steps share their
    rounds); batch1_times_s: other batch-1 times of the same rounds (the control, one step per call)."""
    if batch1_times_s is None:
        batch1_times_s = step["B1"][side]["times_s"]
    largest = largest_batch(step)
    return round_ratios([t / largest for t in step[f"B{largest}"][side]["times_s"]], batch1_times_s)


def targets(result: dict) -> list:
    """The issue's targets as ratios from this run's numbers. A time verdict is the median of the rounds' own ratios
    (each round one call of each, back to back); the ratio of minima is kept beside it. A minimum rests on one call,
    and a short call catches the shared machine's quiet moments more often than a call eight times as long, which
    averages over them (the control that measured it: docs/bench.md)."""
    memory = result["memory_B4"]
    step, forward = result["step"]["B4"], result["forward_B1"]
    per_image, largest = result["per_image"], f"B{largest_batch(result['step'])}"

    def time_check(measure: str, rounds: dict, ratio_of_minima: float) -> tuple:
        return measure, rounds["median"], 1.0, rounds, ratio_of_minima

    checks = [
        time_check("training step B4, native/PyTorch time", step["round_ratios"], step["ratio"]),
        time_check("forward B1, native/PyTorch time", forward["round_ratios"], forward["ratio"]),
        ("training step B4, native/PyTorch peak memory (step's increase)",
         memory["native"]["step_peak_increase_mb"] / memory["torch"]["step_peak_increase_mb"], 1.0, None, None),
        ("parity run B4 / bare runs of its four sides (the larger of first/first and warm/warm, if timed)",
         result["harness_B4"]["ratio"], HARNESS_TARGET, None, None),
        time_check(f"native time per image, {largest}/B1", per_image_round_ratios(result["step"], "native"),
                   per_image[largest]["native"] / per_image["B1"]["native"]),
        time_check(f"PyTorch time per image, {largest}/B1", per_image_round_ratios(result["step"], "torch"),
                   per_image[largest]["torch"] / per_image["B1"]["torch"]),
    ]
    return [{"measure": m, "ratio": v, "target": t, "met": v <= t, "round_ratios": r, "ratio_of_minima": minima}
            for m, v, t, r, minima in checks]


def print_result(result: dict, console, output: Path) -> int:
    from rich.table import Table

    images_per_call, largest = result["profile"]["images_per_call"], largest_batch(result["step"])
    layers = Table(title=f"convolutions at batch 1 (GFLOP/s; numpy sgemm here: {result['sgemm']['gflops']:.0f})")
    for column in ("layer", "input", "forward native/torch", "fwd GFLOP/s native", "torch",
                   "backward native/torch", "bwd GFLOP/s native", "torch"):
        layers.add_column(column, justify="left" if column in ("layer", "input") else "right")
    for row in result["layers"]:
        layers.add_row(row["layer"], "x".join(map(str, row["input"][1:])),
                       f"{row['native_forward']['min_s'] / row['torch_forward']['min_s']:.2f}",
                       f"{row['native_forward_gflops']:.0f}", f"{row['torch_forward_gflops']:.0f}",
                       f"{row['native_backward']['min_s'] / row['torch_backward']['min_s']:.2f}",
                       f"{row['native_backward_gflops']:.0f}", f"{row['torch_backward_gflops']:.0f}")
    if result["layers"]:
        console.print(layers)

    scaling = Table(title=f"time per image of the training step (s; each timed call {images_per_call} images' "
                          "steps); page faults per step (median)")
    for column in ("batch", "native", "PyTorch", "native/PyTorch", "faults native", "faults PyTorch"):
        scaling.add_column(column, justify="right")
    for batch, per in result["per_image"].items():
        faults = result["page_faults_per_step"][batch]
        scaling.add_row(batch, f"{per['native']:.3f}", f"{per['torch']:.3f}", f"{per['native'] / per['torch']:.2f}",
                        f"{faults['native']:.0f}", f"{faults['torch']:.0f}")
    console.print(scaling)
    control = result["B1_one_step_per_call"]
    readings = [f"{name} {control[side]['min_s']:.3f} s (B{largest}/B1 by it "
                f"{per_image_round_ratios(result['step'], side, control[side]['times_s'])['median']:.2f})"
                for side, name in (("native", "native"), ("torch", "PyTorch"))]
    console.print(f"control, batch 1 timed one step per call (each call above trains on {images_per_call} "
                  f"images): {', '.join(readings)}")

    memory = result["memory_B4"]
    summary = Table(title="targets (ratios from this run; a time's ratio is the median of the rounds' own ratios)")
    for column in ("measure", "ratio", "rounds (min-max)", "ratio of minima", "target", "met"):
        summary.add_column(column, justify="left" if column == "measure" else "right")
    for t in result["targets"]:
        rounds, minima = t["round_ratios"], t["ratio_of_minima"]
        summary.add_row(t["measure"], f"{t['ratio']:.2f}", f"{rounds['min']:.2f}-{rounds['max']:.2f}" if rounds else "",
                        f"{minima:.2f}" if minima is not None else "", f"<= {t['target']}",
                        "yes" if t["met"] else "[red]no[/red]")
    console.print(summary)
    console.print(f"peak RSS of the B4 step: native {memory['native']['peak_rss_mb']:.0f} MB "
                  f"(+{memory['native']['step_peak_increase_mb']:.0f} MB for the step), PyTorch "
                  f"{memory['torch']['peak_rss_mb']:.0f} MB (+{memory['torch']['step_peak_increase_mb']:.0f} MB)")
    harness = result["harness_B4"]
    warm = (f"; the minimum of {harness['rounds']} later runs {harness['harness_warm_s']:.1f} s against the sum of "
            f"the sides' minimum steps {harness['bare_four_sides_s']:.1f} s ({harness['warm_ratio']:.2f})"
            if harness["rounds"] else "; no later runs (FULL=1 times them)")
    console.print(f"parity run B4: first {harness['harness_first_s']:.1f} s against the bare steps' first calls "
                  f"{harness['bare_four_sides_first_s']:.1f} s ({harness['first_ratio']:.2f}){warm}; its four "
                  f"models were built first, untimed on both sides ({harness['models_build_s']:.1f} s)")
    console.print(f"the {result['profile']['name']} bench took {result['bench_minutes']:.1f} min; numbers: {output}")
    return 0

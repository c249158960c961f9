"""What `make bench` reports (parity/bench.py), on made-up timings: a time verdict is the median of the rounds' own
ratios, each round's native call paired with the PyTorch call of the same round (and, per image, each round of batch 8
with the same round of batch 1), printed with the rounds' range and the ratio of minima; every timed call of a
training step trains on 8 images, its time reported per step."""

import io

from rich.console import Console

from dataclasses import replace

from parity.bench import (DEFAULT, FULL, Timing, per_image_round_ratios, print_result, round_ratios, targets,
                          timed_pair_result, timed_steps)


def pair(native: list, torch_side: list) -> dict:
    return {"native": Timing(native), "torch": Timing(torch_side)}


def test_round_ratios_pair_each_round_and_the_ratio_of_minima_is_kept():
    # Round by round: 1.0/2.0, 3.0/2.0, 2.0/4.0. Minima: 1.0 / 2.0. Paired across rounds, or sorted before pairing,
    # the spread would differ.
    timed = pair([1.0, 3.0, 2.0], [2.0, 2.0, 4.0])
    assert round_ratios(timed["native"].times_s, timed["torch"].times_s) == {"median": 0.5, "min": 0.5, "max": 1.5}
    result = timed_pair_result(timed)
    assert result["ratio"] == 0.5
    assert result["native"]["times_s"] == [1.0, 3.0, 2.0] and result["native"]["runs"] == 3


def test_per_image_rounds_pair_each_round_of_batch_8_with_the_same_round_of_batch_1():
    # Per image, round by round: (12/8)/1 = 1.5 and (8/8)/2 = 0.5; paired across rounds, or not divided by the
    # batch, the spread would differ.
    step = {"B1": {"native": {"times_s": [1.0, 2.0]}}, "B8": {"native": {"times_s": [12.0, 8.0]}}}
    assert per_image_round_ratios(step, "native") == {"median": 1.0, "min": 0.5, "max": 1.5}


def made_up_result() -> dict:
    step = {f"B{b}": timed_pair_result(pair([b * 1.0, b * 1.2], [b * 1.1, b * 1.1])) for b in (1, 2, 4, 8)}
    memory = {side: {"peak_rss_mb": 900.0, "step_peak_increase_mb": mb} for side, mb in (("native", 690.0),
                                                                                          ("torch", 790.0))}
    result = {
        "profile": {"name": "full", "images_per_call": 8}, "bench_minutes": 27.0,
        "sgemm": {"gflops": 150.0}, "layers": [], "memory_B4": memory, "step": step,
        "forward_B1": timed_pair_result(pair([0.55, 0.50, 0.40], [0.50, 0.45, 0.50])),
        "per_image": {b: {side: step[b][side]["min_s"] / int(b[1:]) for side in ("native", "torch")} for b in step},
        "page_faults_per_step": {b: {"native": 0, "torch": 1234} for b in step},
        "B1_one_step_per_call": {"native": Timing([0.9, 1.1]).as_dict(), "torch": Timing([1.0, 0.8]).as_dict()},
        "harness_B4": {"harness_first_s": 70.0, "bare_four_sides_first_s": 50.0, "first_ratio": 1.4,
                       "harness_warm_s": 52.0, "bare_four_sides_s": 40.0, "warm_ratio": 1.3, "rounds": 2,
                       "models_build_s": 2.5, "ratio": 1.4},
    }
    result["targets"] = targets(result)
    return result


def test_a_time_verdict_is_the_rounds_median_with_their_range_and_the_ratio_of_minima_beside_it():
    result = made_up_result()
    by_measure = {t["measure"]: t for t in result["targets"]}
    forward = by_measure["forward B1, native/PyTorch time"]
    # Rounds: 0.55/0.50 = 1.1, 0.50/0.45 = 1.11, 0.40/0.50 = 0.8: their median misses the target; the ratio of
    # minima, 0.40/0.45, would have met it.
    assert forward["ratio"] == 0.55 / 0.50 and not forward["met"]
    assert forward["ratio_of_minima"] == 0.40 / 0.45
    assert forward["round_ratios"] == {"median": 0.55 / 0.50, "min": 0.8, "max": 0.50 / 0.45}
    assert [t["round_ratios"] is None for t in result["targets"]] == [False, False, True, True, False, False]

    out = io.StringIO()
    print_result(result, Console(file=out, width=250), output=None)
    printed = out.getvalue()
    assert "min-max" in printed  # the column names the range (rich read square brackets as markup)
    forward_row = next(line for line in printed.splitlines() if "forward B1" in line)
    assert [cell.strip() for cell in forward_row.split("│")[2:-1]] == ["1.10", "0.80-1.11", "0.89", "<= 1.0", "no"]
    assert "1234" in printed  # each batch's page faults per step
    # The control, batch 1 one step per call: B8 per image against it, round by round (8.0/8)/0.9 and (9.6/8)/1.1.
    control = next(line for line in printed.splitlines() if line.startswith("control"))
    assert "native 0.900 s (B8/B1 by it 1.10)" in control


class CountingSides:
    """Steps that advance a fake clock by their batch size, one second per image."""

    def __init__(self, clock: list):
        self.clock, self.calls = clock, {}

    def inputs(self, batch_size: int) -> int:
        return batch_size

    def _step(self, side: str, batch_size: int):
        def run():
            self.calls[side, batch_size] = self.calls.get((side, batch_size), 0) + 1
            self.clock[0] += batch_size
        return run

    def native_step(self, batch_size: int):
        return self._step("native", batch_size)

    def torch_step(self, batch_size: int):
        return self._step("torch", batch_size)


def test_every_timed_step_call_trains_on_the_same_number_of_images_and_is_reported_per_step(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr("parity.bench.time.perf_counter", lambda: clock[0])
    sides = CountingSides(clock)
    steps, control = timed_steps(sides, replace(FULL, repeats=2))
    # A warm-up and two rounds: batch 1 runs 8 steps per call plus the control's one, batch 8 one step per call.
    assert sides.calls[("native", 1)] == 3 * (8 + 1) and sides.calls[("torch", 8)] == 3
    for batch_size, pair in steps.items():
        assert pair["native"].times_s == [batch_size, batch_size]  # per step, not per call of 8 images
    assert control["torch"].times_s == [1.0, 1.0]
    assert per_image_round_ratios({f"B{b}": {s: {"times_s": t.times_s} for s, t in p.items()}
                                   for b, p in steps.items()}, "native")["median"] == 1.0


def test_the_default_bench_times_batch_1_and_4_on_four_images_a_call(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr("parity.bench.time.perf_counter", lambda: clock[0])
    sides = CountingSides(clock)
    steps, _ = timed_steps(sides, DEFAULT)
    rounds = DEFAULT.repeats + 1  # and a warm-up
    assert set(steps) == {1, 4}
    assert sides.calls[("native", 1)] == rounds * (4 + 1) and sides.calls[("torch", 4)] == rounds
    step = {f"B{b}": {s: {"times_s": t.times_s} for s, t in p.items()} for b, p in steps.items()}
    assert per_image_round_ratios(step, "native")["median"] == 1.0  # B4 per image over B1, one second each

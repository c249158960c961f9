"""Tensor-by-tensor comparison of the native side against the reference, with a verdict per tensor.

Each float tensor is compared three ways: native float32 vs reference float32 (the numbers a person reads),
native float32 vs the float64 oracle (the verdict, under a derived bound), and native float64 vs the oracle (the
strict check). Non-finite values must sit at the same places on both sides. What each tensor is (how it is judged,
what its indices mean) the model's TensorRules say (parity/core/rules.py).
"""

from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from parity import tensor_stats

from .error_model import probe, typical
from .heap import large_blocks_returned
from .index_compare import compare_exact, compare_selection
from .metrics import BLOCK, MetricsAccumulator, error_metrics, kernel_reads, max_abs, nonfinite_counts
from .rules import TensorRules
from .tolerance import exact_bound, oracle_bound, rms, strict64_bound

WORST_COUNT = 5


@dataclass
class TensorResult:
    name: str
    kind: str
    case: str  # scenario id, e.g. "narrow-B4"
    batch_size: int
    shape: list
    dtype: str
    verdict: str  # "pass" or "fail"
    reasons: list = field(default_factory=list)  # why it failed, one line each
    metrics: dict = field(default_factory=dict)  # native32 vs reference32
    oracle: dict = field(default_factory=dict)  # errors against the float64 oracle and their ratio
    bound: dict = field(default_factory=dict)
    mismatches: int = 0  # elements beyond the bound
    ties: int = 0  # index tensors: differences confined to tied losses at the selection boundary
    mode: str = "propagated"  # or "isolated": the stage fed the reference's own inputs (a model's isolated replay)
    strict64: dict = field(default_factory=dict)  # native64 vs oracle
    worst: list = field(default_factory=list)
    nonfinite: dict = field(default_factory=dict)
    harness_error: bool = False  # the reference's own float32 broke the bound: the bound is wrong, not the port
    typical: dict = field(default_factory=dict)  # each side's error against the typical-error model, where judged
    probe: dict = field(default_factory=dict)  # each side on an exact probe (parity/core/error_model/probe.py)
    port_name: str = ""  # a dump's own name for the tensor, where its manifest maps one (parity/dump_layouts.py)

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def display_name(self) -> str:
        return shown_name(self.name, self.port_name)

    def to_dict(self) -> dict:
        return asdict(self)


def shown_name(name: str, port_name: str | None) -> str:
    """A tensor's name as printed: the harness's, with the port's own beside it where a dump maps one."""
    return f"{name} (port: {port_name})" if port_name else name


CHUNK = 4096


def _largest(flat: np.ndarray, count: int) -> np.ndarray:
    """Flat indices of the `count` largest values (no NaN), largest first, ties to the lower index.

    Chunk maxima narrow the search: the count-th largest chunk maximum t is at most the count-th largest value,
    and fewer than `count` chunks hold values above t, so only those values are sorted; places equal to t fill
    up the rest, lowest index first. Three passes over the tensor instead of a partition of all of it."""
    if flat.size <= count * CHUNK:
        candidates = np.arange(flat.size)
        return candidates[np.lexsort((candidates, -flat))][:count]
    usable = flat.size - flat.size % CHUNK
    maxima = flat[:usable].reshape(-1, CHUNK).max(axis=1)
    if usable < flat.size:
        maxima = np.append(maxima, flat[usable:].max())
    threshold = np.partition(maxima, maxima.size - count)[maxima.size - count]
    above = np.flatnonzero(flat > threshold)
    above = above[np.lexsort((above, -flat[above]))][:count]
    needed, equal = count - above.size, []
    for start in range(0, flat.size, CHUNK * 64):
        if needed == 0:
            break
        found = start + np.flatnonzero(flat[start:start + CHUNK * 64] == threshold)[:needed]
        equal.append(found)
        needed -= found.size
    return np.concatenate([above, *equal])


def _worst_rows(rules, name, native, reference, oracle, flat_indices, errors) -> list:
    rows = []
    for flat_index, error in zip(flat_indices, errors):
        index = np.unravel_index(int(flat_index), native.shape)
        rows.append(
            {
                "index": [int(i) for i in index],
                "meaning": rules.decode_index(name, native.shape, index),
                "native": float(native[index]),
                "reference": float(reference[index]),
                "oracle": float(oracle[index]),
                "abs_error": float(error),
            }
        )
    return rows


def compare_tensor(
    rules: TensorRules,
    name: str,
    case: str,
    batch_size: int,
    native: np.ndarray | None,
    reference: np.ndarray | None,
    oracle: np.ndarray | None,
    native64: np.ndarray | None = None,
    context: dict | None = None,
    strict_oracle: np.ndarray | None = None,
    inherited: float = 1.0,
    fed_by: int | None = None,
    bounds: tuple | None = None,
    strict: tuple | None = None,
) -> TensorResult:
    """rules: the model's (parity/core/rules.py); context: for a selection, the ranking losses and labels of each side
    (selection_context);
    strict_oracle: what native64 is held to (default: oracle); fed_by: see tolerance.oracle_bound; bounds: the
    error model's per-element bounds (native's, reference's) on |side - oracle| (parity/core/error_model), which then
    judge the float32 sides instead of tolerance.oracle_bound, and optionally whether the native bound assumed a
    tensor the native side lacks (a partial dump: bound["assumed_missing"]); strict: the strict check's outcome
    judged earlier (strict_check), instead of native64."""
    strict_oracle = oracle if strict_oracle is None else strict_oracle
    if strict is None and native64 is not None:
        strict = strict_check(rules, name, native64, strict_oracle, context or {})
    kind = rules.kind(name)
    result = TensorResult(name, kind, case, batch_size, [], "", "pass")
    missing = [side for side, a in (("native", native), ("reference", reference), ("oracle", oracle)) if a is None]
    if missing:
        result.verdict = "fail"
        result.reasons.append(f"missing on the {', '.join(missing)} side")
        return result
    result.shape, result.dtype = list(reference.shape), str(reference.dtype)
    if native.shape != reference.shape:
        result.verdict = "fail"
        result.reasons.append(f"shape {tuple(native.shape)} on the native side, {tuple(reference.shape)} in the reference")
        return result

    if kind == "index":
        _judge_index(rules, result, native, reference, context or {})
    else:
        _check_nonfinite(result, native, reference)
        if bounds is not None and bounds[0] is not None and result.kind != "exact":
            _judge_elementwise(rules, result, native, reference, oracle, *bounds[:2])
            if len(bounds) > 2 and bounds[2]:
                result.bound["assumed_missing"] = True
        else:
            _judge_against_oracle(rules, result, native, reference, oracle, inherited, fed_by)
    if strict is not None:
        result.strict64, reasons = strict
        result.reasons += reasons
    result.verdict = "fail" if result.reasons else "pass"
    return result


def strict_check(rules: TensorRules, name: str, native64: np.ndarray | None, strict_oracle: np.ndarray | None,
                 context: dict) -> tuple | None:
    """The strict check of one tensor: native float64 against the float64 oracle -> (strict64 dict, reasons), or
    None where either lacks the tensor or their shapes differ (the float32 comparison reports that)."""
    if native64 is None or strict_oracle is None or np.shape(native64) != np.shape(strict_oracle):
        return None
    if rules.kind(name) == "index":
        return _strict64_index(rules, name, native64, strict_oracle, context)
    return _strict64_values(rules.kind(name), native64, strict_oracle)


def _check_nonfinite(result, native, reference) -> None:
    """NaN, +Inf and -Inf must sit at the same places on both sides."""
    result.nonfinite = {"native": nonfinite_counts(native), "reference": nonfinite_counts(reference)}
    if not any(result.nonfinite["native"].values()) and not any(result.nonfinite["reference"].values()):
        return
    same = (np.array_equal(np.isnan(native), np.isnan(reference))
            and np.array_equal(np.isposinf(native), np.isposinf(reference))
            and np.array_equal(np.isneginf(native), np.isneginf(reference)))
    if not same:
        result.reasons.append(
            f"non-finite values differ: native {result.nonfinite['native']}, reference {result.nonfinite['reference']}"
        )


@dataclass
class _OracleErrors:
    """|native32 - yardstick| summarized: what the float32 verdict reads."""

    largest: float  # where both sides are finite
    rms: float  # non-finite disagreements count as 0 here (they are counted as mismatches)
    worst: np.ndarray  # flat indices of the largest errors, largest first
    worst_errors: np.ndarray
    count_beyond: Callable[[float], int]  # elements whose error exceeds a bound (another pass over the tensor)

    def mismatches(self, bound: float) -> int:
        """Elements beyond the bound: 0 without another pass when the largest error is within it (an infinite
        error, from a non-finite disagreement, is always among the worst)."""
        within = self.largest <= bound and bool(np.isfinite(self.worst_errors).all())
        return 0 if within else self.count_beyond(bound)


def _judge_against_oracle(rules, result, native, reference, oracle, inherited, fed_by=None) -> None:
    """The float32 verdict: exact tensors bit-identical to the reference, everything else within the oracle bounds."""
    if result.kind == "exact":
        bound = exact_bound(rules.exact[result.name])
        result.metrics = error_metrics(native, reference)
        errors = _errors_any(native, reference, reference.astype(np.float64))
    else:
        bound = oracle_bound(reference, oracle, inherited, fed_by)
        if _all_finite(result, oracle):
            result.metrics, errors = _measure_finite(native, reference, oracle)
        else:
            result.metrics = error_metrics(native, reference)
            errors = _errors_any(native, reference, oracle)
    result.bound = bound.to_dict()
    result.mismatches = errors.mismatches(bound.value)
    result.oracle = {
        "native_error": errors.largest,
        "reference_error": bound.reference_error,
        "ratio": (errors.largest / bound.reference_error) if bound.reference_error else None,
    }
    if result.mismatches:
        result.reasons.append(
            f"{result.mismatches} of {native.size} elements beyond the bound {bound.value:.3g} "
            f"(largest error {errors.largest:.3g}; bound = {bound.derivation})"
        )
    if bound.rms_value is not None:
        result.oracle.update({"native_rms": errors.rms, "reference_rms": bound.reference_rms})
        if errors.rms > bound.rms_value:
            result.reasons.append(
                f"RMS error {errors.rms:.3g} beyond {bound.rms_value:.3g} "
                f"({bound.factor:.3g} x reference RMS error {bound.reference_rms:.3g} + floor)"
            )
    result.worst = _worst_rows(rules, result.name, native, reference, oracle, errors.worst, errors.worst_errors)


@dataclass
class _Margins:
    """|side - oracle| / bound, element by element: how many elements exceed their bound, the largest ratio, the
    largest error, and where the largest ratios are (flat indices, largest first, with their errors)."""

    beyond: int
    largest: float
    largest_error: float
    worst: np.ndarray
    worst_margins: np.ndarray
    worst_errors: np.ndarray


def _margins(side, oracle, bound) -> _Margins:
    """An element where the side or the oracle is not finite counts as 0 here (the non-finite check judges it); an
    infinite bound (not judgeable) as 0 too. In one pass of the compiled kernel where it takes the arrays (a float32
    side), else block by block in numpy."""
    if side.dtype == np.float32 and oracle.dtype == np.float64 and kernel_reads(side, oracle, bound):
        m = tensor_stats.margins(side, oracle, bound)
        worst = np.asarray(m["worst"], dtype=np.int64)
        with np.errstate(invalid="ignore"):
            errors = np.abs(np.subtract(side.ravel()[worst], oracle.ravel()[worst], dtype=np.float64))
        errors[~np.isfinite(errors)] = 0.0
        return _Margins(m["beyond"], m["largest"], m["largest_error"], worst, np.asarray(m["worst_margins"]), errors)
    side, oracle, bound = side.ravel(), oracle.ravel(), bound.ravel()
    beyond, largest, largest_error, worst, worst_margins, worst_errors = 0, 0.0, 0.0, [], [], []
    for start in range(0, side.size, BLOCK):
        block = slice(start, start + BLOCK)
        with np.errstate(invalid="ignore", divide="ignore"):
            error = np.abs(np.subtract(side[block], oracle[block], dtype=np.float64))
            error[~np.isfinite(error)] = 0.0
            margin = np.where(error > 0, error / bound[block], 0.0)
        beyond += int(np.count_nonzero(error > bound[block]))
        largest = max(largest, float(margin.max(initial=0.0)))
        largest_error = max(largest_error, float(error.max(initial=0.0)))
        top = _largest(margin, WORST_COUNT)
        worst.append(start + top)
        worst_margins.append(margin[top])
        worst_errors.append(error[top])
    if not worst:
        return _Margins(0, 0.0, 0.0, np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0))
    worst, worst_margins, worst_errors = map(np.concatenate, (worst, worst_margins, worst_errors))
    order = np.lexsort((worst, -worst_margins))[:WORST_COUNT]
    return _Margins(beyond, largest, largest_error, worst[order], worst_margins[order], worst_errors[order])


def _judge_elementwise(rules, result, native, reference, oracle, native_bound, reference_bound) -> None:
    """The float32 verdict under the error model: every element of the native side within its own bound, and
    the reference's float32, a correct implementation, within its own (else the bound is wrong: a harness error)."""
    if _all_finite(result, oracle):
        result.metrics, _ = _measure_finite(native, reference, oracle)
    else:
        result.metrics = error_metrics(native, reference)
    native_side = _margins(native, oracle, native_bound)
    reference_side = _margins(reference, oracle, reference_bound)
    judged = np.isfinite(native_bound)
    largest_bound = float(native_bound.max(initial=0.0, where=judged))
    result.bound = {
        "rule": "error_model", "value": largest_bound,
        "derivation": "per element: the stage's own rounding (gamma(n) x a bound on the sum of its terms' magnitudes) "
                      "+ the side's measured input deviations carried through the stage (parity/core/error_model)",
        "native_margin": native_side.largest, "reference_margin": reference_side.largest,
        "unjudged": int(native_bound.size - np.count_nonzero(judged)),
    }
    result.mismatches = native_side.beyond
    result.oracle = {"native_error": native_side.largest_error, "reference_error": reference_side.largest_error}
    if reference_side.beyond:
        result.harness_error = True
        where = _meaning(rules, result.name, reference.shape, reference_side.worst)
        result.reasons.append(
            f"harness error: the reference's own float32 exceeds the error model's bound at {reference_side.beyond} "
            f"of {reference.size} elements (largest error/bound {reference_side.largest:.3g}, at {where}): the "
            f"bound is wrong, not the port")
    if native_side.beyond:
        where = _meaning(rules, result.name, native.shape, native_side.worst)
        result.reasons.append(
            f"{native_side.beyond} of {native.size} elements beyond their bound (largest error/bound "
            f"{native_side.largest:.3g}, at {where}; the reference's largest {reference_side.largest:.3g})")
    rows = _worst_rows(rules, result.name, native, reference, oracle, native_side.worst, native_side.worst_errors)
    for row, flat, margin in zip(rows, native_side.worst, native_side.worst_margins):
        row.update({"bound": float(native_bound.ravel()[flat]), "margin": float(margin)})
    result.worst = rows


def judge_typical(result, native, reference, exact, variance, channel_axis=None, channels=None) -> None:
    """The statistical verdict beside the per-element bound (parity/core/error_model/typical.py), for a stage both
    sides computed from the same inputs: exact, its exact result on them, and variance, the model's per element;
    with channel_axis, channel by channel too (channels: the indices of the channels the arrays hold). The native
    side beyond the limit fails; the reference beyond it means the model is wrong: a harness error."""
    judge = lambda side: typical.judge(side, exact, variance, channel_axis, channels)
    native_side, reference_side = judge(native), judge(reference)
    result.typical = {"native": native_side, "reference": reference_side}
    if reference_side["margin"] > 1:
        result.harness_error = True
        result.reasons.append(f"harness error: the reference's own float32 has a {_typical_summary(reference_side)}:"
                              f" the model is wrong, not the port")
    if native_side["margin"] > 1:
        result.reasons.append(f"{_typical_summary(native_side)} (the reference's {reference_side['ratio']:.3g}): a "
                              f"systematic error the per-element bound may let through")
    result.verdict = "fail" if result.reasons else "pass"


def judge_exact_probe(result, native, reference, expected, magnitude, unseen) -> None:
    """The exact probe's verdict (parity/core/error_model/probe.py): both sides' results on inputs where float32's
    result is one rounding of an exact value, whatever the order of summation. The native side differing anywhere
    fails; the reference differing means the probe's premise is wrong: a harness error."""
    judge = lambda side: probe.judge_probe(side, expected, magnitude)
    native_side, reference_side = judge(native), judge(reference)
    result.probe = {"native": native_side, "reference": reference_side, "unseen_biases": unseen}
    if reference_side["differ"]:
        result.harness_error = True
        result.reasons.append(f"harness error: the reference's own float32 differs from the exact probe's result in "
                              f"{reference_side['differ']} elements: the probe's premise is wrong, not the port")
    if native_side["differ"]:
        result.reasons.append(
            f"exact probe: {native_side['differ']} of {native_side['elements']} elements differ from the one correct "
            f"float32 result (largest {native_side['units']:.3g} roundings of its terms, at {native_side['worst']}; "
            f"output channels {_few(native_side['channels'])}): a bias or weight differs, or the stage is not a sum "
            f"of products")
    result.verdict = "fail" if result.reasons else "pass"


def _few(values, shown=8) -> str:
    return ", ".join(map(str, values[:shown])) + (f" and {len(values) - shown} more" if len(values) > shown else "")


def _typical_summary(side: dict) -> str:
    """The verdict that fails (the whole tensor's, else its worst channel's), in words."""
    described = ("root mean square of error / the typical float32 rounding error of its sums (a plain loop sits near "
                 "0.7)")
    channel = side.get("channel")
    judged, where = side, ""
    if channel and channel["margin"] > side["ratio"] / side["limit"]:
        judged, where = channel, f" in channel {channel['index']}"
    return (f"{described}{where}: {judged['ratio']:.3g}, limit {judged['limit']:.3g} over {judged['samples']} "
            f"distinct elements")


def _meaning(rules, name, shape, worst) -> str:
    if not len(worst):
        return "-"
    index = np.unravel_index(int(worst[0]), shape)
    meaning = rules.decode_index(name, shape, index)
    return f"{list(map(int, index))}" + (f" ({meaning})" if meaning else "")


def _all_finite(result, oracle) -> bool:
    """Whether native, reference (already counted by _check_nonfinite) and oracle are finite everywhere (and not
    empty)."""
    return (oracle.size > 0 and not any(result.nonfinite["native"].values()) and not any(result.nonfinite["reference"].values())
            and not any(nonfinite_counts(oracle).values()))


def _errors_any(native, reference, yardstick) -> _OracleErrors:
    """Whole-tensor passes that handle non-finite values: |native - yardstick| is 0 where either side is not
    finite, and infinite where the sides disagree on being finite (counted, and listed first among the worst)."""
    error = np.asarray(np.subtract(native, yardstick, dtype=np.float64))  # an array even for a scalar tensor
    np.abs(error, out=error)
    both_finite = np.isfinite(native) & np.isfinite(reference)
    if not both_finite.all():
        error[~both_finite] = 0.0
        same_nonfinite = (np.isnan(native) & np.isnan(reference)) | (native == reference)
        error[~both_finite & ~same_nonfinite] = np.inf
    error = error.ravel()
    finite = np.isfinite(error)
    worst = _largest(error, WORST_COUNT)
    return _OracleErrors(
        largest=float(error.max(initial=0.0, where=finite)),
        rms=rms(np.where(finite, error, 0.0)),
        worst=worst, worst_errors=error[worst],
        count_beyond=lambda value: int(np.count_nonzero(error > value)),
    )


def _measure_finite(native, reference, oracle) -> tuple:
    """The native side's statistics of a finite tensor: (native vs reference metrics, native error against the
    oracle), in one pass of the compiled kernel for float32 sides and a float64 oracle (every tensor of a parity
    run), else _measure_finite_numpy."""
    if not (kernel_reads(native, reference, oracle) and native.dtype == reference.dtype == np.float32
            and oracle.dtype == np.float64):
        return _measure_finite_numpy(native, reference, oracle)
    s = tensor_stats.native_stats(native, reference, oracle, max_abs(reference))
    errors = _OracleErrors(
        largest=s["oracle_largest"], rms=float(np.sqrt(s["oracle_energy"] / native.size)),
        worst=np.array(s["worst"], dtype=np.int64), worst_errors=np.array(s["worst_errors"]),
        count_beyond=lambda value: tensor_stats.count_beyond(native, oracle, value),
    )
    return MetricsAccumulator.from_kernel(s, native.size).result(), errors


def _measure_finite_numpy(native, reference, oracle) -> tuple:
    """_measure_finite in numpy, for any dtypes: one pass over blocks of BLOCK elements, whose float64 temporaries
    stay in cache."""
    native, reference, oracle = native.ravel(), reference.ravel(), oracle.ravel()
    metrics = MetricsAccumulator(native.dtype, reference.dtype, max_abs(reference))
    native_max = native_energy = 0.0
    worst, worst_errors = [], []
    for start in range(0, native.size, BLOCK):
        block = slice(start, start + BLOCK)
        metrics.add(native[block], reference[block])
        error = np.abs(np.subtract(native[block], oracle[block], dtype=np.float64))
        native_max = max(native_max, float(error.max(initial=0.0)))
        native_energy += float(np.dot(error, error))
        top = _largest(error, WORST_COUNT)
        worst.append(start + top)
        worst_errors.append(error[top])
    worst, worst_errors = np.concatenate(worst), np.concatenate(worst_errors)
    order = np.lexsort((worst, -worst_errors))[:WORST_COUNT]  # the blocks' worst, merged: ties to the lower index
    errors = _OracleErrors(
        largest=native_max, rms=float(np.sqrt(native_energy / native.size)),
        worst=worst[order], worst_errors=worst_errors[order],
        count_beyond=lambda value: int(np.count_nonzero(np.abs(np.subtract(native, oracle, dtype=np.float64)) > value)),
    )
    return metrics.result(), errors


def _largest_difference(native64, strict_oracle) -> float:
    """max |native64 - oracle| where the oracle is finite, block by block in cache; NaN if any such difference is
    NaN (which then fails the check)."""
    if kernel_reads(native64, strict_oracle) and native64.dtype == strict_oracle.dtype == np.float64:
        return tensor_stats.largest_difference(native64, strict_oracle) + 0.0
    native64, strict_oracle = native64.ravel(), strict_oracle.ravel()
    maxima = [0.0]
    for start in range(0, native64.size, BLOCK):
        oracle = strict_oracle[start:start + BLOCK]
        with np.errstate(invalid="ignore"):  # inf - inf where the oracle is not finite: dropped just below
            difference = np.subtract(native64[start:start + BLOCK], oracle)
        finite = np.isfinite(oracle)
        if not finite.all():
            difference = difference[finite]
        maxima.append(float(max(difference.max(initial=0.0), -difference.min(initial=0.0))))  # no |.| temporary
    return float(np.max(maxima)) + 0.0  # np.max keeps a NaN; + 0.0: never -0.0


def _strict64_values(kind, native64, strict_oracle) -> tuple:
    """Native float64 against the float64 oracle (exact tensors: bit-identical)."""
    largest = _largest_difference(native64, strict_oracle)
    if kind == "exact":
        bound, passed = exact_bound("float64"), bool(np.array_equal(native64, strict_oracle))
    else:
        bound = strict64_bound(strict_oracle)
        passed = largest <= bound.value
    reasons = [] if passed else [
        f"native float64 differs from the float64 oracle by {largest:.3g} > {bound.value:.3g} ({bound.derivation})"]
    return {"max_abs": largest, "bound": bound.to_dict(), "passed": passed}, reasons


def _strict64_index(rules, name, native64, strict_oracle, context) -> tuple:
    if name in rules.selections:
        c = context[name]
        strict = strict64_bound(c["strict_loss"]).value
        diff = compare_selection(rules, name, native64, strict_oracle, c["strict_loss"], c["native64_loss"],
                                 c["strict_labels"], strict)
    else:
        diff = compare_exact(rules, name, native64, strict_oracle)
    return ({"mismatches": diff.mismatches, "ties": diff.ties, "passed": diff.mismatches == 0},
            [f"native float64 vs oracle: {r}" for r in diff.reasons])


def _judge_index(rules, result, native, reference, context) -> None:
    result.bound = exact_bound("integer decisions; selections up to ties at the selection boundary").to_dict()
    if result.name in rules.selections:
        c = context[result.name]
        diff = compare_selection(rules, result.name, native, reference, c["reference_loss"], c["native_loss"],
                                 c["reference_labels"], c["loss_window"])
    else:
        diff = compare_exact(rules, result.name, native, reference)
    result.mismatches, result.ties, result.worst = diff.mismatches, diff.ties, diff.worst
    result.metrics = {"differing": int(np.sum(native != reference)), "ties": diff.ties}
    result.reasons += diff.reasons


def selection_context(rules, native, reference, oracle, error_model=None) -> dict:
    """selection name -> the ranking losses and labels its comparison reads its ties from, for every selection whose
    losses the reference trace holds."""
    context = {}
    for name, selection in rules.selections.items():
        loss = selection.loss
        if loss not in reference:
            continue
        # A dump without the ranking losses: ties at the selection boundary are read from the reference's losses.
        context[name] = {"reference_loss": reference[loss], "native_loss": native.get(loss, reference[loss]),
                         "reference_labels": reference[selection.labels],
                         "loss_window": loss_window(error_model, loss, native, reference, oracle)}
    return context


def loss_window(error_model, loss, native, reference, oracle):
    """How far the two sides' ranking losses `loss` may each be from the exact ones, added: a selection
    comparison's tie window ([B,N], the error model's bounds, element by element). Without an error model (a
    trajectory's own comparison), the reference's float32 error bound, one number."""
    reference_bound = None if error_model is None else error_model.bound(loss, reference)
    if reference_bound is None:
        return oracle_bound(reference[loss], oracle[loss]).value
    native_side = native if np.shape(native.get(loss)) == np.shape(reference[loss]) else reference
    return reference_bound + error_model.bound(loss, native_side)


def strict_checks(rules: TensorRules, native64: dict, strict_oracle: dict) -> dict:
    """name -> the strict check's outcome (strict_check) for every tensor both float64 traces hold. Judged before
    the float32 sides, so native64 and its oracle can be freed before the error model's bounds need memory."""
    context = {name: {"native64_loss": native64.get(s.loss), "strict_loss": strict_oracle.get(s.loss),
                      "strict_labels": strict_oracle.get(s.labels)} for name, s in rules.selections.items()}
    outcomes = {name: strict_check(rules, name, value, strict_oracle.get(name), context)
                for name, value in native64.items()}
    return {name: outcome for name, outcome in outcomes.items() if outcome is not None}


def compare_traces(rules: TensorRules, case: str, batch_size: int, native: dict, reference: dict, oracle: dict, native64: dict | None = None,
                   strict_oracle: dict | None = None, routing_ties: dict | None = None, error_model=None,
                   kept_bounds: dict | None = None, strict: dict | None = None) -> list:
    """Every tensor named on either side, in the reference's execution order; a name on one side only fails.

    rules: the model's (parity/core/rules.py); strict_oracle: the float64 run native64 is held to, when it differs from `oracle` (routing ties replayed);
    routing_ties: near-tied pooling windows per pool tap, reported as that tap's ties; error_model: a
    model's error model of this run (bound(name, side) -> per-element bounds or None), whose per-element bounds then judge every float tensor (without
    one, tolerance.oracle_bound does); kept_bounds: a dict that receives the reference's bounds (float32, rounded
    up), which the isolated replay's stages are held to; strict: the strict checks judged already (strict_checks),
    instead of native64."""
    names = list(reference) + [n for n in native if n not in reference]
    strict_oracle = oracle if strict_oracle is None else strict_oracle
    if strict is None and native64 is not None:
        strict = strict_checks(rules, native64, strict_oracle)
    context = selection_context(rules, native, reference, oracle, error_model)
    results, inherited = [], 1.0
    with large_blocks_returned():  # the bounds' temporaries would fragment the heap
        output_gradient_nonzero = None  # of the last grad/<tap>: the layer whose parameter gradients follow it
        for n in names:
            if n.startswith("grad/") and oracle.get(n) is not None:
                output_gradient_nonzero = int(np.count_nonzero(oracle[n]))
            fed_by = output_gradient_nonzero if n.startswith("param_grad/") else None
            bounds = _bounds(rules, error_model, n, native, reference, oracle, kept_bounds)
            result = compare_tensor(rules, n, case, batch_size, native.get(n), reference.get(n), oracle.get(n),
                                    context=context, inherited=inherited, fed_by=fed_by, bounds=bounds,
                                    strict=(strict or {}).get(n))
            result.ties += (routing_ties or {}).get(n, 0)
            results.append(result)
            if result.passed:
                inherited = max(inherited, _error_ratio(result))
    return results


def _bounds(rules, error_model, name, native, reference, oracle, kept_bounds) -> tuple | None:
    """(native's, reference's) per-element bounds of one tensor and whether the native's assumed a tensor the native
    side lacks; None where the error model does not bound it."""
    if error_model is None or reference.get(name) is None or oracle.get(name) is None:
        return None
    if rules.kind(name) in ("index", "exact"):
        return None
    reference_bound = error_model.bound(name, reference)
    if reference_bound is None:
        return None
    if kept_bounds is not None:  # kept even where the native side lacks the tensor: a dump's isolated stages
        kept_bounds[name] = round_up_to_float32(reference_bound)
    if native.get(name) is None or np.shape(native[name]) != np.shape(reference[name]):
        return None
    native_bound = error_model.bound(name, native)
    return native_bound, reference_bound, error_model.assumed_missing


def round_up_to_float32(bound: np.ndarray) -> np.ndarray:
    """A float32 copy of a bound, never below it (half the memory to keep)."""
    if bound.dtype == np.float64 and kernel_reads(bound):
        return tensor_stats.round_up_to_float32(bound).reshape(bound.shape)
    with np.errstate(over="ignore"):  # beyond float32's range: infinity, the float32 not below it
        narrow = bound.astype(np.float32)
    below = narrow < bound
    narrow[below] = np.nextafter(narrow[below], np.float32(np.inf))
    return narrow


def _error_ratio(result) -> float:
    """How far above the reference's own error this tensor's native error went (max and RMS), for inheritance."""
    o = result.oracle
    ratios = [o.get("ratio") or 0.0]
    if o.get("reference_rms"):
        ratios.append(o["native_rms"] / o["reference_rms"])
    return max(ratios)

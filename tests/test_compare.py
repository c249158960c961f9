"""The comparison's own machinery: the worst-element search and the strict float64 check's passes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.ssd300.rules import RULES
from parity.core.compare import (CHUNK, _errors_any, _largest, _largest_difference, _measure_finite, _measure_finite_numpy,
                            compare_tensor)
from parity.core.metrics import BLOCK, error_metrics
from parity.core.tolerance import oracle_bound


def _brute_force_largest(flat, count):
    everything = np.arange(flat.size)
    return everything[np.lexsort((everything, -flat))][:count]


@settings(max_examples=60, deadline=None)
@given(size=st.sampled_from([1, 4, 5, CHUNK * 5, CHUNK * 5 + 1, CHUNK * 7 - 3, CHUNK * 12]),
       levels=st.sampled_from([1, 2, 5, 1000, 10**9]), count=st.integers(1, 7), seed=st.integers(0, 2**32 - 1),
       spikes=st.integers(0, 9))
def test_largest_matches_a_full_sort_ties_to_the_lower_index(size, levels, count, seed, spikes):
    """Few distinct values (levels) make ties everywhere, an all-equal error included (levels=1); spikes put
    several large values into one chunk."""
    rng = np.random.default_rng(seed)
    flat = rng.integers(0, levels, size).astype(np.float64)
    if spikes and size > 10:
        start = int(rng.integers(0, size - 10))
        flat[start:start + spikes] = levels + rng.integers(0, 3, spikes)
    if size > 2 and seed % 3 == 0:
        flat[int(rng.integers(0, size))] = np.inf  # a non-finite disagreement is an infinite error
    np.testing.assert_array_equal(_largest(flat, count), _brute_force_largest(flat, count))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e-3])
def test_the_strict_check_fails_on_a_non_finite_or_large_float64_difference(bad):
    oracle = np.random.default_rng(0).standard_normal(1000)
    native64 = oracle.copy()
    native64[17] = oracle[17] + bad if np.isfinite(bad) else bad
    result = compare_tensor(RULES, "backbone.conv1_1", "case", 1, oracle.astype(np.float32), oracle.astype(np.float32),
                            oracle, native64)
    assert not result.strict64["passed"] and result.verdict == "fail"
    assert compare_tensor(RULES, "backbone.conv1_1", "case", 1, oracle.astype(np.float32), oracle.astype(np.float32),
                          oracle, oracle.copy()).strict64["passed"]


@pytest.mark.parametrize("measure", [_measure_finite, _measure_finite_numpy])
@pytest.mark.parametrize("size", [1, 1000, BLOCK * 3 + 17])
def test_the_one_pass_measure_of_a_finite_tensor_matches_the_whole_tensor_passes(size, measure):
    """The one-pass measures of a finite tensor (the compiled kernel, the usual path, and numpy's blocks in cache)
    against the general whole-tensor passes (the path for tensors with non-finite values): the same maxima, worst
    elements and counts; sums equal up to rounding."""
    rng = np.random.default_rng(size)
    oracle = rng.standard_normal(size) * 10
    oracle[: size // 3] = 0.0  # zeros: ties among the errors, and fewer informative elements
    reference = (oracle + 1e-6 * rng.standard_normal(size)).astype(np.float32)
    native = (oracle + 1e-6 * rng.standard_normal(size)).astype(np.float32)
    native[size // 2] += 1.0  # a bug in one element
    native[-1] = -reference[-1]  # and a sign flipped: the ULP line's two halves
    metrics, errors = measure(native, reference, oracle)
    expected_metrics = error_metrics(native, reference)
    for key in ("max_abs", "max_rel", "max_ulp", "finite_compared"):
        assert metrics[key] == expected_metrics[key], key
    for key in ("nmse", "cosine"):
        assert metrics[key] == pytest.approx(expected_metrics[key], rel=1e-12), key
    expected = _errors_any(native, reference, oracle)
    assert errors.largest == expected.largest
    assert errors.rms == pytest.approx(expected.rms, rel=1e-12)
    np.testing.assert_array_equal(errors.worst, expected.worst)
    np.testing.assert_array_equal(errors.worst_errors, expected.worst_errors)
    for value in (0.0, 1e-6, 0.5, 2.0):
        assert errors.count_beyond(value) == expected.count_beyond(value)


def test_the_strict_check_finds_a_nan_in_any_block_and_skips_non_finite_oracle_values():
    oracle = np.random.default_rng(1).standard_normal(BLOCK * 3)
    native64 = oracle.copy()
    oracle[5] = native64[5] = np.inf  # non-finite in the oracle: not compared
    assert _largest_difference(native64, oracle) == 0.0
    native64[BLOCK * 2 + 9] = np.nan  # in the last block, after finite blocks
    assert np.isnan(_largest_difference(native64, oracle))


def test_the_oracle_bound_measured_by_blocks_is_the_whole_tensor_one():
    """oracle_bound's block-by-block reference error against the same statistics over the whole tensor, with
    non-finite differences (left out of both) in a later block."""
    rng = np.random.default_rng(3)
    oracle = rng.standard_normal(BLOCK * 2 + 5) * 100
    reference = (oracle + 1e-5 * rng.standard_normal(oracle.size)).astype(np.float32)
    reference[BLOCK + 7], oracle[BLOCK * 2 + 1] = np.nan, np.inf
    diff = reference.astype(np.float64) - oracle
    finite = diff[np.isfinite(diff)]
    bound = oracle_bound(reference, oracle)
    assert bound.reference_error == np.abs(finite).max()
    assert bound.reference_rms == pytest.approx(np.sqrt(np.mean(finite ** 2)), rel=1e-12)
    assert bound.floor == pytest.approx(4 * np.finfo(np.float32).eps * np.abs(oracle[np.isfinite(oracle)]).max())

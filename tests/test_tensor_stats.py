"""The compiled comparison kernels (parity/kernels) held to the numpy versions they replace on the parity run's
path: maxima, counts and worst elements equal exactly, sums up to rounding; arrays the kernels do not take go to
numpy; bad arguments raise instead of crashing. (The finite tensor's measure: tests/test_compare.py.)"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parity import tensor_stats
from parity.core.compare import _largest_difference, _margins, _measure_finite, round_up_to_float32
from parity.core.metrics import kernel_reads, max_abs, nonfinite_counts
from parity.core.tolerance import _reference_error


def numpy_only(a: np.ndarray) -> np.ndarray:
    """The same values in a non-contiguous view: what the kernels refuse, so the numpy version runs."""
    spread = np.repeat(a.ravel(), 2)[::2]
    assert not kernel_reads(spread) and np.array_equal(spread, a.ravel(), equal_nan=True)
    return spread


SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, 3.0e38]


@st.composite
def tensors(draw):
    """A float64 oracle near N(0, 10) with zeros (tied errors) and non-finite values; float32 reference and native
    near it, the native with one large error."""
    size = draw(st.integers(2, 3 * 65536 + 50))  # 2: a strided view of one element is contiguous
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    oracle = rng.standard_normal(size) * 10
    oracle[: size // 3] = 0.0
    reference = (oracle + 1e-6 * rng.standard_normal(size)).astype(np.float32)
    native = (oracle + 1e-6 * rng.standard_normal(size)).astype(np.float32)
    native[size // 2] += 1.0
    for array in (oracle, reference, native):
        for _ in range(draw(st.integers(0, 3))):
            array[rng.integers(size)] = SPECIALS[rng.integers(len(SPECIALS))]
    return native, reference, oracle


@settings(max_examples=30, deadline=None)
@given(tensors())
def test_finite_scans_and_the_reference_error_equal_numpy_with_non_finite_values(arrays):
    native, reference, oracle = arrays
    for a in arrays:
        assert nonfinite_counts(a) == nonfinite_counts(numpy_only(a))
        assert max_abs(a) == max_abs(numpy_only(a))
    fast, slow = _reference_error(reference, oracle), _reference_error(numpy_only(reference), numpy_only(oracle))
    assert (fast[0], fast[2], fast[3], fast[4]) == (slow[0], slow[2], slow[3], slow[4])
    assert fast[1] == pytest.approx(slow[1], rel=1e-12)
    native64 = native.astype(np.float64)
    fast, slow = _largest_difference(native64, oracle), _largest_difference(numpy_only(native64), numpy_only(oracle))
    assert fast == slow or (np.isnan(fast) and np.isnan(slow))


@settings(max_examples=30, deadline=None)
@given(tensors(), st.sampled_from([np.float32, np.float64]))
def test_margins_against_per_element_bounds_equal_numpy(arrays, bound_dtype):
    """Bounds with zeros (an error there is an infinite margin), infinities (not judged) and equal ratios."""
    native, _, oracle = arrays
    rng = np.random.default_rng(native.size)
    bound = (1e-6 * rng.uniform(0.5, 2.0, native.size)).astype(bound_dtype)
    bound[rng.integers(native.size, size=3)] = 0.0
    bound[rng.integers(native.size, size=3)] = np.inf
    native, oracle = native.copy(), oracle.copy()
    native[:2], oracle[:2], bound[:2] = 0.0, 0.0, 0.0  # no error at a zero bound: within it, margin 0
    native[2:4], oracle[2:4], bound[2:4] = 0.5, 0.0, 0.5  # an error exactly at its bound: within it, margin 1
    fast, slow = _margins(native, oracle, bound), _margins(numpy_only(native), numpy_only(oracle), numpy_only(bound))
    assert (fast.beyond, fast.largest, fast.largest_error) == (slow.beyond, slow.largest, slow.largest_error)
    for a, b in ((fast.worst, slow.worst), (fast.worst_margins, slow.worst_margins), (fast.worst_errors, slow.worst_errors)):
        np.testing.assert_array_equal(a, b)


def test_a_bound_kept_in_float32_is_never_below_it_and_equals_numpy():
    rng = np.random.default_rng(0)
    bound = np.concatenate([rng.uniform(0, 1, 70000) * 10.0 ** rng.integers(-40, 38, 70000),
                            [0.0, np.inf, 1e-46, 3.5e38, float(np.float32(0.1))]]).reshape(-1, 5)
    fast, slow = round_up_to_float32(bound), round_up_to_float32(numpy_only(bound).reshape(bound.shape))
    assert fast.dtype == np.float32 and fast.shape == bound.shape
    np.testing.assert_array_equal(fast, slow)
    assert bool((fast >= bound).all())
    assert bool((fast.astype(np.float64) == bound).any())  # exact where the bound is a float32 already


def test_the_worst_elements_break_ties_to_the_lower_index_across_chunks():
    """Equal errors in several of the kernel's 65536-element chunks: the lowest indices are listed, as numpy's."""
    oracle = np.zeros(5 * 65536)
    native = np.zeros(5 * 65536, dtype=np.float32)
    native[[4 * 65536 + 1, 3 * 65536, 65536 + 7, 65536 + 3, 2, 9]] = 1.0
    _, errors = _measure_finite(native, native.copy(), oracle)
    np.testing.assert_array_equal(errors.worst, [2, 9, 65536 + 3, 65536 + 7, 3 * 65536])


@pytest.mark.parametrize("call, message", [
    (lambda: tensor_stats.finite_scan([1.0, 2.0]), "must be a numpy.ndarray, got list"),
    (lambda: tensor_stats.finite_scan(np.zeros(3, np.int64)), "has dtype int64, expected float64"),
    (lambda: tensor_stats.reference_error(np.zeros(3, np.float64), np.zeros(3)), "'reference' has dtype float64"),
    (lambda: tensor_stats.reference_error(np.zeros(3, np.float32), np.zeros(4)), "differ in size: 3 and 4"),
    (lambda: tensor_stats.native_stats(np.zeros(3, np.float32), np.zeros((3, 2), np.float32)[:, 0], np.zeros(3), 1.0),
     "'reference' is not C-contiguous"),
    (lambda: tensor_stats.largest_difference(np.zeros(2), np.zeros(3)), "differ in size: 2 and 3"),
    (lambda: tensor_stats.margins(np.zeros(3, np.float32), np.zeros(3), np.zeros(2)), "'side' and 'bound' differ"),
    (lambda: tensor_stats.margins(np.zeros(3), np.zeros(3), np.zeros(3)), "'side' has dtype float64"),
])
def test_bad_arguments_raise_with_what_was_received(call, message):
    with pytest.raises((TypeError, ValueError), match=message):
        call()

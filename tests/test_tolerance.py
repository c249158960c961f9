"""The oracle bound's factor follows how many independent rounding errors a tensor carries: its own non-zero
elements, and for a parameter gradient no more than the non-zero values of the output gradient it is summed from."""

import numpy as np

from models.ssd300.rules import RULES
from parity.core.compare import compare_traces
from parity.core.tolerance import LARGE_TENSOR_FACTOR, oracle_bound

RNG = np.random.default_rng(0)


def _sides(shape, reference_error):
    oracle = RNG.standard_normal(shape)
    reference = (oracle + reference_error * RNG.standard_normal(shape)).astype(np.float32)
    return reference, oracle


def test_a_parameter_gradient_fed_by_few_values_gets_the_small_tensor_factor():
    reference, oracle = _sides((24, 128, 3, 3), 1e-7)
    assert oracle_bound(reference, oracle).factor == LARGE_TENSOR_FACTOR
    assert oracle_bound(reference, oracle, fed_by=100).factor == 8.0
    assert oracle_bound(reference, oracle, fed_by=10**6).factor == LARGE_TENSOR_FACTOR


def _trace(grad_nonzero: int, native_scale: float) -> tuple:
    """A one-layer backward trace: grad/<tap> with `grad_nonzero` non-zero values, then the layer's weight gradient,
    whose native error is native_scale x the reference's."""
    grad = np.zeros(1000)
    grad[:grad_nonzero] = RNG.standard_normal(grad_nonzero)
    weight_oracle = RNG.standard_normal(5000)
    reference_error = 1e-6 * RNG.standard_normal(5000)
    oracle = {"grad/conv": grad, "param_grad/conv.weight": weight_oracle}
    reference = {"grad/conv": grad.astype(np.float32), "param_grad/conv.weight": (weight_oracle + reference_error).astype(np.float32)}
    native = {"grad/conv": grad.astype(np.float32),
              "param_grad/conv.weight": (weight_oracle + native_scale * reference_error).astype(np.float32)}
    return native, reference, oracle


def _weight_verdict(grad_nonzero, native_scale) -> bool:
    results = compare_traces(RULES, "case", 1, *_trace(grad_nonzero, native_scale))
    return next(r for r in results if r.name == "param_grad/conv.weight").passed


def test_compare_traces_feeds_the_output_gradient_count_to_the_weight_gradient():
    assert _weight_verdict(grad_nonzero=100, native_scale=6.0)       # 6x the reference: within 8x for 100 values
    assert not _weight_verdict(grad_nonzero=1000, native_scale=6.0)  # ... but not with 1000 independent values
    assert not _weight_verdict(grad_nonzero=100, native_scale=60.0)  # and a real bug stays far outside

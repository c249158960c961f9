"""The sweep's models go when they are no longer needed: a model that stayed alive would hold its weights and
gradients beside every later case's own. The float64 ones are never cached (0.4 GB each side for the full SSD300,
freed with the case that used them); the float32 ones are cached and let go when told (parity/conftest.py does so
after each module)."""

import gc
import weakref

import numpy as np

from models.ssd300.sides import forget_models, native_model, reference_model


def test_float64_models_are_built_afresh_and_freed_with_their_last_user():
    reference = reference_model("narrow", 0, "float64")
    assert reference_model("narrow", 0, "float64") is not reference
    assert next(reference.parameters()).dtype.is_floating_point and next(reference.parameters()).element_size() == 8
    alive = weakref.ref(reference)
    del reference
    gc.collect()
    assert alive() is None


def test_the_float64_native_model_has_the_float32_weights_widened():
    float32 = native_model("narrow", 0, "float32").state_dict()
    float64 = native_model("narrow", 0, "float64").state_dict()
    assert sorted(float32) == sorted(float64)
    for name, value in float32.items():
        assert float64[name].dtype == np.float64
        np.testing.assert_array_equal(float64[name], value.astype(np.float64), err_msg=name)


def test_forgotten_float32_models_are_freed():
    reference = reference_model("narrow", 0, "float32")
    native_model("narrow", 0, "float32")
    assert reference_model("narrow", 0, "float32") is reference  # cached while in use
    alive = weakref.ref(reference)
    del reference
    forget_models()
    gc.collect()
    assert alive() is None

"""The sweep's model caches let go when told (parity/conftest.py does so after each module): a cached model that
stayed alive would hold its weights and gradients beside the next module's own (1.5 GB for the full SSD300)."""

import gc
import weakref

from parity.sides import forget_models, native_model, reference_model


def test_forgotten_models_are_freed():
    reference = reference_model("narrow", 0, "float64")
    native_model("narrow", 0, "float64")
    assert reference_model("narrow", 0, "float64") is reference  # cached while in use
    alive = weakref.ref(reference)
    del reference
    forget_models()
    gc.collect()
    assert alive() is None
    assert reference_model.cache_info().currsize == 0 and native_model.cache_info().currsize == 0

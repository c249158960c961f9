import numpy as np
import pytest

from models.ssd300.reference.model import state_dict_arrays
from models.ssd300.sides import native_model, reference_model


@pytest.fixture(scope="session")
def narrow_weights():
    """The narrow config's weights as float32 arrays (fresh copies per use are the test's job)."""
    return state_dict_arrays(reference_model("narrow", 0, "float32"))


@pytest.fixture(scope="session")
def narrow_native():
    return native_model("narrow", 0, "float32")


@pytest.fixture
def image():
    return np.zeros((1, 3, 300, 300), np.float32)

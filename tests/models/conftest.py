"""Shared fixtures of the model tests."""

import pytest

from linrec.models.spectral import clear_spectrum_cache


@pytest.fixture(autouse=True)
def _fresh_spectrum_cache():
    """Every test starts and ends with an empty eigendecomposition cache."""
    clear_spectrum_cache()
    yield
    clear_spectrum_cache()

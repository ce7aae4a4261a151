"""Shared fixtures and helpers of the model tests."""

import pytest
import torch

from linrec.models.spectral import clear_spectrum_cache


@pytest.fixture(autouse=True)
def _fresh_spectrum_cache():
    """Every test starts and ends with an empty eigendecomposition cache."""
    clear_spectrum_cache()
    yield
    clear_spectrum_cache()


def tensors_in(value) -> list[torch.Tensor]:
    """Every torch tensor in `value`, also inside dicts, lists and tuples (a model's
    attributes)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for item in value.values() for t in tensors_in(item)]
    if isinstance(value, list | tuple):
        return [t for item in value for t in tensors_in(item)]
    return []

"""The item-item scoring kernel (linrec.models._sparse_dense): bitwise scipy's csr @ dense."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.models import _sparse_dense
from linrec.models._sparse_dense import sparse_dense_product


@pytest.fixture(autouse=True, params=["kernel", "scipy"])
def path(request, monkeypatch):
    """The compiled kernel (forced at any size) and scipy's product below its threshold."""
    if request.param == "kernel":
        monkeypatch.setattr(_sparse_dense, "KERNEL_MIN_MULTIPLY_ADDS", 0)
    return request.param


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_equals_scipy_bit_for_bit(dtype, threads):
    """Rows with 0..13 entries (every remainder of the four-entry step), unsorted indices,
    duplicates and non-binary values: the same additions in the same order as scipy."""
    rng = np.random.default_rng(0)
    n_rows, n_items, width = 70, 50, 37
    rows, cols, vals = [], [], []
    for r in range(n_rows):
        k = r % 14
        rows += [r] * k
        cols += list(rng.integers(0, n_items, k))  # unsorted, with repeats
        vals += list(rng.normal(size=k))
    X = sp.csr_matrix((vals, (rows, cols)), shape=(n_rows, n_items))
    X.has_canonical_format = False
    X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=X.shape)  # keep the stored order
    W = rng.normal(size=(n_items, width)).astype(dtype)
    got = sparse_dense_product(X, W, threads)
    expected = sp.csr_matrix(X, dtype=dtype) @ W
    assert got.dtype == dtype and got.shape == (n_rows, width)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_allclose(got, X.toarray() @ W.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_shapes_must_agree():
    with pytest.raises(ValueError, match="3 columns but W has 4 rows"):
        sparse_dense_product(sp.csr_matrix((2, 3)), np.zeros((4, 2)), 1)
    assert sparse_dense_product(sp.csr_matrix((0, 3)), np.zeros((3, 2)), 2).shape == (0, 2)

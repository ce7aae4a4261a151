"""The Recommender contract (linrec.models.base): the matrix checks every model shares, the
fit/score templates, the weights accessor, save/load."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.errors import ConfigError, DataError
from linrec.models import EASE, WMF, ItemKNN, PureSVD
from linrec.models.base import binary_pattern, check_foldin, check_train


def _train() -> sp.csr_matrix:
    rng = np.random.default_rng(0)
    return sp.csr_matrix((rng.random((40, 12)) < 0.3).astype(np.float32))


def test_check_train_and_foldin():
    train = _train()
    assert check_train(train, "m.fit") is not None
    for bad, match in [(train.toarray(), "scipy.sparse"), (sp.csr_matrix((3, 0)), "0 items")]:
        with pytest.raises(DataError, match=match):
            check_train(bad, "m.fit")
    nan = train.copy()
    nan.data[0] = np.nan
    with pytest.raises(DataError, match="m.fit: train contains NaN"):
        check_train(nan, "m.fit")
    with pytest.raises(DataError, match="m.score: foldin has 5 items, the model was fitted on 12"):
        check_foldin(sp.csr_matrix((2, 5)), 12, "m.score")


def test_binary_pattern_is_a_copy_of_ones():
    matrix = sp.csr_matrix(np.array([[2.0, 0.0, 3.0]]))
    matrix.data[0] = 0.0  # an explicit zero is not an interaction
    pattern = binary_pattern(matrix, "m.fit")
    assert pattern.nnz == 1 and pattern.data.tolist() == [1.0] and pattern.dtype == np.float64
    assert matrix.data.tolist() == [0.0, 3.0]


@pytest.mark.parametrize("model", [EASE(lam=1.0), PureSVD(rank=3), ItemKNN(k=3),
                                   WMF(factors=2, iterations=1)])
def test_every_model_checks_its_matrices_and_fitted_state(model):
    name = model.name
    with pytest.raises(ConfigError, match=f"{name} is not fitted"):
        model.score(sp.csr_matrix((1, 12)))
    with pytest.raises(DataError, match=f"{name}.fit: train must be"):
        model.fit(np.ones((3, 12)))
    model.fit(_train())
    assert model.is_fitted and model.n_items_ == 12
    with pytest.raises(DataError, match=f"{name}.score: foldin has 13 items"):
        model.score(sp.csr_matrix((1, 13)))


def test_weights_accessor():
    train = _train()
    ease = EASE(lam=1.0, dtype="float64").fit(train)
    np.testing.assert_allclose(ease.weights(), ease.W)
    np.testing.assert_allclose(train @ ease.weights(), ease.score(train))
    knn = ItemKNN(k=3).fit(train)
    np.testing.assert_allclose((train @ knn.weights()).toarray(), knn.score(train), rtol=1e-6)
    with pytest.raises(NotImplementedError, match="wmf has no item-item matrix"):
        WMF(factors=2, iterations=1).fit(train).weights()


def test_save_and_load_keep_the_config_and_the_fit(tmp_path):
    train = _train()
    model = EASE(lam=2.0).fit(train)
    model.save(tmp_path / "model.pkl")
    loaded = EASE.load(tmp_path / "model.pkl")
    assert loaded.config == model.config and loaded.lam == 2.0
    np.testing.assert_array_equal(loaded.score(train), model.score(train))

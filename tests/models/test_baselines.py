"""Baselines: most popular, item-KNN against brute-force cosine, SLIM against a direct
ElasticNet and the KKT conditions of its objective (Ning & Karypis 2011)."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.linear_model import ElasticNet

from linrec.errors import ConfigError, DataError
from linrec.models import build_model
from linrec.models.baselines import SLIM, ItemKNN, MostPopular


def random_matrix(m: int, n: int, density: float, seed: int, binary: bool) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    dense = (rng.random((m, n)) < density) * (1.0 if binary else rng.random((m, n)) + 0.5)
    dense[:, -1] = 0.0  # one item without interactions
    return sp.csr_matrix(dense)


def test_most_popular_scores_training_counts():
    X = sp.csr_matrix(np.array([[1, 0, 1], [1, 0, 0], [1, 1, 0]], dtype=np.float32))
    scores = MostPopular().fit(X).score(X[:2])
    np.testing.assert_array_equal(scores, [[3, 1, 1], [3, 1, 1]])
    assert isinstance(build_model("most_popular"), MostPopular)


def brute_force_knn(dense: np.ndarray, k: int, shrink: float) -> np.ndarray:
    n = dense.shape[1]
    norms = np.linalg.norm(dense, axis=0)
    W = np.zeros((n, n))
    for j in range(n):
        sims = []
        for i in range(n):
            if i == j or norms[i] == 0 or norms[j] == 0:
                continue
            sim = dense[:, i] @ dense[:, j] / (norms[i] * norms[j] + shrink)
            if sim > 0:
                sims.append((sim, i))
        for sim, i in sorted(sims, reverse=True)[:k]:
            W[i, j] = sim
    return W


@pytest.mark.parametrize("k, shrink", [(3, 0.0), (5, 2.0), (100, 0.0)])
def test_itemknn_matches_brute_force_cosine(k, shrink, monkeypatch):
    X = random_matrix(60, 15, 0.3, seed=k, binary=False)  # real values: no ties in the top-k
    monkeypatch.setattr("linrec.models.baselines._KNN_BLOCK_FLOATS", 4 * 15)  # several blocks
    model = ItemKNN(k=k, shrink=shrink).fit(X)
    expected = brute_force_knn(X.toarray(), k, shrink)
    np.testing.assert_allclose(model.W_.toarray(), expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(model.score(X[:4]), X[:4].toarray() @ expected, rtol=1e-5,
                               atol=1e-6)


def slim_kkt_violation(dense: np.ndarray, w: np.ndarray, j: int, l1: float, l2: float) -> float:
    """Largest violation of the KKT conditions of min ½‖x_j − Xw‖² + l1‖w‖₁ + l2/2‖w‖²,
    w >= 0, w_j = 0: g_i + l1 = 0 where w_i > 0 and g_i + l1 >= 0 where w_i = 0 (i ≠ j)."""
    residual = dense[:, j] - dense @ w
    g = -dense.T @ residual + l2 * w + l1
    g = np.delete(g, j)
    free = np.delete(w, j) > 0
    return max(np.abs(g[free]).max(initial=0.0), (-g[~free]).max(initial=0.0))


def test_slim_nonnegative_zero_diagonal_and_optimal():
    X = random_matrix(80, 12, 0.35, seed=3, binary=True)
    l1, l2 = 0.5, 2.0
    model = SLIM(l1=l1, l2=l2, tol=1e-12, max_iter=100_000, n_jobs=1).fit(X)
    W = model.W_.toarray()
    assert np.all(W >= 0)
    assert np.all(np.diag(W) == 0.0)
    assert np.count_nonzero(W) > 0
    dense = X.toarray()
    for j in range(dense.shape[1]):
        assert slim_kkt_violation(dense, W[:, j].astype(np.float64), j, l1, l2) < 1e-4


def test_slim_column_equals_direct_elasticnet():
    X = random_matrix(70, 10, 0.3, seed=4, binary=True)
    l1, l2 = 0.3, 1.0
    serial = SLIM(l1=l1, l2=l2, tol=1e-10, max_iter=50_000, n_jobs=1).fit(X).W_.toarray()
    dense = X.toarray()
    m, j = dense.shape[0], 4
    others = np.delete(np.arange(dense.shape[1]), j)  # the column is dropped, not zeroed
    direct = ElasticNet(alpha=(l1 + l2) / m, l1_ratio=l1 / (l1 + l2), positive=True,
                        fit_intercept=False, tol=1e-10, max_iter=50_000)
    direct.fit(dense[:, others], dense[:, j])
    np.testing.assert_allclose(serial[others, j], direct.coef_, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_slim_parallel_columns_equal_serial():
    X = random_matrix(70, 10, 0.3, seed=4, binary=True)
    serial = SLIM(l1=0.3, l2=1.0, tol=1e-10, n_jobs=1).fit(X).W_.toarray()
    parallel = SLIM(l1=0.3, l2=1.0, tol=1e-10, n_jobs=2).fit(X).W_.toarray()
    np.testing.assert_array_equal(serial, parallel)


@pytest.mark.parametrize("make", [
    lambda: ItemKNN(k=0),
    lambda: ItemKNN(shrink=-1.0),
    lambda: SLIM(l1=-1.0),
    lambda: SLIM(l1=0.0, l2=0.0),
])
def test_bad_parameters_raise_config_error(make):
    with pytest.raises(ConfigError, match="allowed"):
        make()


def test_score_before_fit_and_wrong_width():
    X = random_matrix(10, 5, 0.5, seed=0, binary=True)
    with pytest.raises(ConfigError, match="fit"):
        ItemKNN().score(X)
    with pytest.raises(DataError, match="items"):
        MostPopular().fit(X).score(sp.csr_matrix((1, 3)))

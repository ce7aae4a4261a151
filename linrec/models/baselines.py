"""Simple baselines: most popular, item-KNN (cosine) and SLIM (Ning & Karypis 2011).
Scores are `foldin @ W` with a sparse W (item-KNN, SLIM) or the training counts (most popular)."""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from joblib import Parallel, delayed

from linrec.models.base import Recommender, Validation
from linrec.models.configs import ItemKNNConfig, MostPopularConfig, SLIMConfig
from linrec.models.linalg import gram_block

#: floats per dense block of similarities in ItemKNN.fit (block rows x n_items)
_KNN_BLOCK_FLOATS = 1 << 24


class MostPopular(Recommender):
    """Scores every item by its number of training users (the same list for every user)."""

    config_class = MostPopularConfig

    def _fit(self, train: sp.csr_matrix, validation: Validation | None) -> None:
        self.item_counts_ = np.asarray((train != 0).sum(axis=0), dtype=np.float32).ravel()

    def _score(self, foldin: sp.csr_matrix, users: np.ndarray | None) -> np.ndarray:
        return np.tile(self.item_counts_, (foldin.shape[0], 1))


def _top_k_per_row(block: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) indices of the k largest positive entries of each row of `block`."""
    if k < block.shape[1]:
        cols = np.argpartition(-block, k - 1, axis=1)[:, :k]
    else:
        cols = np.broadcast_to(np.arange(block.shape[1]), block.shape)
    rows = np.broadcast_to(np.arange(block.shape[0])[:, None], cols.shape)
    keep = block[rows, cols] > 0
    return rows[keep], cols[keep]


class ItemKNN(Recommender):
    """Item-based k-nearest neighbours with cosine similarity
    sim(i, j) = x_iᵀx_j / (‖x_i‖‖x_j‖ + shrink), i ≠ j (x_i: column i of the training matrix).

    The neighbours N_k(j) of item j are its k most similar items (positive similarity only);
    W_ij = sim(i, j) for i ∈ N_k(j), else 0 (sparse), and score(u, j) = Σ_{i ∈ I_u} W_ij."""

    binary_input = False  # cosine similarity of weighted interactions as they are

    config_class = ItemKNNConfig

    def _fit(self, train: sp.csr_matrix, validation: Validation | None) -> None:
        X = sp.csr_matrix(train, dtype=np.float64)
        n_items = X.shape[1]
        Xt = X.T.tocsr()
        norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=0)).ravel())
        block_rows = max(1, min(n_items, _KNN_BLOCK_FLOATS // max(1, n_items)))
        rows_all, cols_all, vals_all = [], [], []
        for start in range(0, n_items, block_rows):
            stop = min(n_items, start + block_rows)
            sim = np.zeros((stop - start, n_items))
            gram_block(Xt, X, start, stop, sim)  # rows start:stop of XᵀX
            with np.errstate(divide="ignore", invalid="ignore"):
                sim /= norms[start:stop, None] * norms[None, :] + self.shrink
            sim[~np.isfinite(sim)] = 0.0  # items without interactions
            sim[np.arange(stop - start), np.arange(start, stop)] = 0.0
            rows, cols = _top_k_per_row(sim, min(self.k, n_items))
            rows_all.append(rows + start)
            cols_all.append(cols)
            vals_all.append(sim[rows, cols])
        neighbours = sp.csr_matrix(
            (np.concatenate(vals_all), (np.concatenate(rows_all), np.concatenate(cols_all))),
            shape=(n_items, n_items), dtype=np.float32)
        self.W_ = neighbours.T.tocsr()  # column j holds the neighbours of item j

    def _score(self, foldin: sp.csr_matrix, users: np.ndarray | None) -> np.ndarray:
        return (sp.csr_matrix(foldin, dtype=np.float32) @ self.W_).toarray()

    def weights(self) -> sp.csr_matrix:
        self.check_fitted()
        return self.W_


def _slim_columns(X: sp.csc_matrix, columns: np.ndarray, alpha: float, l1_ratio: float,
                  max_iter: int, tol: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SLIM weights of `columns`: for each j, ElasticNet(positive) of x_j on X with column j
    zeroed (so W_jj = 0). Returns (rows, cols, values) of the nonzero weights."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import ElasticNet

    X = X.copy()  # column j is zeroed in place below
    regression = ElasticNet(alpha=alpha, l1_ratio=l1_ratio, positive=True, fit_intercept=False,
                            copy_X=False, max_iter=max_iter, tol=tol, selection="cyclic")
    rows, cols, vals = [], [], []
    for j in columns:
        lo, hi = X.indptr[j], X.indptr[j + 1]
        target = np.zeros(X.shape[0])
        target[X.indices[lo:hi]] = X.data[lo:hi]
        saved = X.data[lo:hi].copy()
        X.data[lo:hi] = 0.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            regression.fit(X, target)
        X.data[lo:hi] = saved
        weights = regression.coef_
        weights[j] = 0.0
        nonzero = np.flatnonzero(weights > 0)
        rows.append(nonzero)
        cols.append(np.full(nonzero.size, j))
        vals.append(weights[nonzero])
    return np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)


class SLIM(Recommender):
    """SLIM (Ning & Karypis 2011): min_W ½‖X − XW‖² + l1‖W‖₁ + (l2/2)‖W‖² s.t. W >= 0, diag(W) = 0,
    one column at a time with scikit-learn's ElasticNet (coordinate descent), columns in parallel
    (joblib, `n_jobs` processes). ElasticNet minimizes 1/(2m)‖y − Xw‖² + αρ‖w‖₁ + ½α(1−ρ)‖w‖²,
    so α = (l1 + l2)/m and ρ = l1/(l1 + l2) for m users."""

    binary_input = False  # the regression takes weighted interactions as they are

    config_class = SLIMConfig

    def _fit(self, train: sp.csr_matrix, validation: Validation | None) -> None:
        X = sp.csr_matrix(train, dtype=np.float64).tocsc()
        n_users, n_items = X.shape
        alpha = (self.l1 + self.l2) / n_users
        l1_ratio = self.l1 / (self.l1 + self.l2)
        n_chunks = max(1, min(n_items, 4 * (self.n_jobs if self.n_jobs > 0 else 8)))
        chunks = np.array_split(np.arange(n_items), n_chunks)
        parts = Parallel(n_jobs=self.n_jobs)(
            delayed(_slim_columns)(X, chunk, alpha, l1_ratio, self.max_iter, self.tol)
            for chunk in chunks if chunk.size)
        rows, cols, vals = (np.concatenate(p) for p in zip(*parts, strict=True))
        self.W_ = sp.csr_matrix((vals, (rows, cols)), shape=(n_items, n_items), dtype=np.float32)

    def _score(self, foldin: sp.csr_matrix, users: np.ndarray | None) -> np.ndarray:
        return (sp.csr_matrix(foldin, dtype=np.float32) @ self.W_).toarray()

    def weights(self) -> sp.csr_matrix:
        self.check_fitted()
        return self.W_

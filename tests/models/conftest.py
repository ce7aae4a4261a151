"""Shared fixtures and helpers of the model tests."""

import numpy as np
import pytest
import scipy.sparse as sp
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


# --- data and independent solves shared by the EASE, iALS and device tests ---


def binary_matrix(m: int, n: int, density: float, seed: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    dense = (rng.random((m, n)) < density).astype(np.float64)
    dense[0, :] = 1.0  # every item seen at least once
    return sp.csr_matrix(dense)


def zero_diag_column_solve(X: np.ndarray, penalty: np.ndarray, j: int,
                           loss_scale: float = 1.0) -> np.ndarray:
    """Column j of the zero-diagonal model: min ‖x_j − X_{−j}w‖² + Σ_i penalty_i w_i² by least
    squares on the stacked system [X_{−j}; diag(√penalty_{−j})] (loss_scale = 1 − α scales X)."""
    n = X.shape[1]
    others = np.delete(np.arange(n), j)
    design = np.vstack([np.sqrt(loss_scale) * X[:, others], np.diag(np.sqrt(penalty[others]))])
    target = np.concatenate([X[:, j] / np.sqrt(loss_scale), np.zeros(n - 1)])
    w = np.linalg.lstsq(design, target, rcond=None)[0]
    return np.insert(w, j, 0.0)


def random_binary(n_users: int = 40, n_items: int = 18, density: float = 0.25,
                  seed: int = 0, full_row: bool = True) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    dense = (rng.random((n_users, n_items)) < density).astype(np.float32)
    dense[3] = 0.0  # one user without interactions
    if full_row:
        dense[5, :] = 1.0  # one user with every item
    return sp.csr_matrix(dense)


def brute_user_factors(x: np.ndarray, item_factors: np.ndarray, alpha0: float, reg: float,
                       nu: float, confidence: np.ndarray, quad: np.ndarray) -> np.ndarray:
    """argmin_w Σ_{i∈S} (q_u ŷ² − 2 c_u ŷ) + α₀ Σ_i ŷ² + λ(|S| + α₀ n)^ν ‖w‖², one
    np.linalg.solve per user (Li 2023, eq. 99)."""
    n_items, k = item_factors.shape
    gram = item_factors.T @ item_factors
    out = np.zeros((x.shape[0], k))
    for u in range(x.shape[0]):
        observed = np.flatnonzero(x[u])
        h_s = item_factors[observed]
        lam = reg * (len(observed) + alpha0 * n_items) ** nu
        system = quad[u] * h_s.T @ h_s + alpha0 * gram + lam * np.eye(k)
        out[u] = np.linalg.solve(system, confidence[u] * h_s.sum(0))
    return out


def brute_item_factors(x: np.ndarray, user_factors: np.ndarray, alpha0: float, reg: float,
                       nu: float, confidence: np.ndarray, quad: np.ndarray) -> np.ndarray:
    """h_i = (W_Sᵀ diag(q) W_S + α₀WᵀW + Λ_i I)⁻¹ W_Sᵀ c (Li 2023, eq. 99, item step)."""
    n_users, k = user_factors.shape
    gram = user_factors.T @ user_factors
    out = np.zeros((x.shape[1], k))
    for i in range(x.shape[1]):
        users = np.flatnonzero(x[:, i])
        w_s = user_factors[users]
        lam = reg * (len(users) + alpha0 * n_users) ** nu
        system = (w_s * quad[users, None]).T @ w_s + alpha0 * gram + lam * np.eye(k)
        out[i] = np.linalg.solve(system, w_s.T @ confidence[users])
    return out


def sized_advice_ease(**params):
    """An EASE whose memory advice depends on the catalogue (a subclass may size its suggestion:
    "Try model=lrr with rank <= n_items // 5.")."""
    from linrec.models.ease import EASE

    class SizedAdviceEASE(EASE):
        def _memory_alternative(self, n_items: int) -> str:
            return f"Try model=lrr with rank <= {n_items // 5}."

    return SizedAdviceEASE(**params)

"""How well an estimator recovers the exact metric: average relative error over K, winner
accuracy across models (Li et al. 2023, Tables 1–11; docs/concepts/sampled.md) and agreement
with the exact order of all the models (Kendall's τ_b: does a sampled metric rank the models
as full ranking does; Krichene & Rendle 2020)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from linrec.errors import ConfigError


def average_relative_error(
    est_curve: np.ndarray, true_curve: np.ndarray, ks: Iterable[int] = range(1, 51)
) -> float:
    """ARE in %: (100/|ks|) Σ_K |T̂@K − T@K| / T@K over K in ks (1-based; curves hold T@1, T@2, ...
    at index K-1). A K with T@K = 0 contributes 0 but still counts in |ks| (the authors' code)."""
    est = np.asarray(est_curve, dtype=np.float64)
    true = np.asarray(true_curve, dtype=np.float64)
    idx = np.asarray(list(ks), dtype=np.int64) - 1
    if idx.size == 0 or idx.min() < 0 or idx.max() >= min(len(est), len(true)):
        raise ConfigError(
            f"ks must lie in [1, {min(len(est), len(true))}] (the curve lengths), "
            f"got [{idx.min() + 1 if idx.size else '-'}, {idx.max() + 1 if idx.size else '-'}]"
        )
    t, e = true[idx], est[idx]
    nonzero = t != 0
    rel = np.zeros_like(t)
    rel[nonzero] = np.abs(e[nonzero] - t[nonzero]) / np.abs(t[nonzero])
    return float(100.0 * rel.mean())


def _values_per_repeat(est_values: np.ndarray, true_values: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """est (repeats, models) and true (models,) as float64, checked to name the same models."""
    est = np.atleast_2d(np.asarray(est_values, dtype=np.float64))
    true = np.asarray(true_values, dtype=np.float64).ravel()
    if est.shape[1] != true.size:
        raise ConfigError(
            f"est_values has {est.shape[1]} models per repeat but true_values has {true.size}"
        )
    return est, true


def winner_accuracy(est_values: np.ndarray, true_values: np.ndarray) -> int:
    """Number of repeats whose estimated winner is the true winner (Li et al. 2023, Table 8).

    est_values: (repeats, models) estimated T̂@K of each model in each repeat; true_values:
    (models,) exact T@K. The winner is the argmax (first index on ties)."""
    est, true = _values_per_repeat(est_values, true_values)
    return int(np.sum(np.argmax(est, axis=1) == np.argmax(true)))


def order_agreement(est_values: np.ndarray, true_values: np.ndarray) -> tuple[float, int]:
    """(mean Kendall τ_b over the repeats, repeats that order every pair of models as the exact
    metric does). est_values (repeats, models), true_values (models,) as for winner_accuracy.
    τ_b = (concordant − discordant) / √((pairs untied in est)(pairs untied in true)): 1 for the
    exact order, −1 for its reverse; a repeat whose estimates are all equal counts τ = 0."""
    est, true = _values_per_repeat(est_values, true_values)
    if true.size < 2:
        raise ConfigError(f"an order of {true.size} model is not defined: compare two or more")
    first, second = np.triu_indices(true.size, k=1)
    true_sign = np.sign(true[first] - true[second])  # (pairs,)
    est_sign = np.sign(est[:, first] - est[:, second])  # (repeats, pairs)
    score = (est_sign * true_sign).sum(axis=1)
    norm = np.sqrt(np.count_nonzero(est_sign, axis=1) * float(np.count_nonzero(true_sign)))
    tau = np.divide(score, norm, out=np.zeros(len(est)), where=norm > 0)
    same = np.all(est_sign == true_sign, axis=1)
    return float(tau.mean()), int(same.sum())

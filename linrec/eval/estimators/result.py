"""EstimateResult: the common output of every estimator (docs/concepts/sampled.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from linrec.eval.metrics import curve


@dataclass
class EstimateResult:
    """One estimator's output (docs/concepts/sampled.md common output contract).

    p_hat: float64 (n_items,), the implied global-rank distribution P̂(R), p_hat[R-1]; linear
      estimators (BV, MN, LS) may give negative entries and a sum != 1 (docs/concepts/sampled.md),
      never clipped.
    sample_size: the common n, or the per-target sizes (int64 array) for adaptive_mle.
    prior: where the prior P(R) came from ("uniform", "mle", "mes", "pooled:mle", "array") or None.
    params: the estimator's hyper-parameters (gamma, entropy_weight, fit_scale, ...).
    iterations / solver / log_likelihood: EM or solver details (log_likelihood is the per-target
      average log-likelihood before each EM iteration and after the last one).
    """

    name: str
    p_hat: np.ndarray
    n_items: int
    sample_size: int | np.ndarray
    n_targets: int
    scheme: str
    prior: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    iterations: int | None = None
    solver: str | None = None
    log_likelihood: np.ndarray | None = None

    def curve(self, metric: str, k_max: int = 50) -> np.ndarray:
        """T̂@1..T̂@k_max for metric (linrec.eval.metrics.curve), float64 (k_max,)."""
        return curve(self.p_hat, metric, k_max)

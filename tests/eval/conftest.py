"""Helpers shared by the item-sampling and rank-simulation tests: a chi-square goodness-of-fit
test and the threshold its p-values must pass. (Import them with
`from tests.eval.conftest import ...`.)"""

from __future__ import annotations

import numpy as np
from scipy import stats

P_MIN = 1e-3  # generous threshold of the goodness-of-fit tests (fixed seeds)


def chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """Chi-square goodness of fit, cells with expected count < 5 merged into one."""
    counts = np.asarray(counts, dtype=np.float64).ravel()
    probs = np.asarray(probs, dtype=np.float64).ravel()
    assert counts.shape == probs.shape
    assert np.all(counts[probs == 0] == 0), "observed an impossible outcome"
    expected = probs / probs.sum() * counts.sum()
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    if keep.sum() < 2:  # a point mass: the impossible-outcome check above is the whole test
        return 1.0
    return float(stats.chisquare(obs[keep], exp[keep]).pvalue)

"""Helpers shared by the evaluation tests: a chi-square goodness-of-fit test and the threshold
its p-values must pass, global ranks by brute force, the exact null laws of the signed-rank
and sign tests, and the tail p-values of a symmetric law. (Import them with
`from tests.eval.conftest import ...`.)"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from linrec.data.splits import EvalSet
from linrec.eval.ranks import tie_break_keys_at

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


def brute_force_ranks(scores: np.ndarray, evalset: EvalSet, seed: int,
                      exclude_foldin: bool = True) -> dict:
    """{(row, item): R}, R = 1 + #{candidates j: s_j > s_t or (s_j == s_t and key_j < key_t)};
    the candidates are the items that are neither the user's targets nor (unless
    exclude_foldin is false) its fold-in items."""
    out = {}
    foldin, targets = evalset.foldin.toarray() > 0, evalset.targets.toarray() > 0
    if not exclude_foldin:
        foldin[:] = False
    for r in range(scores.shape[0]):
        keys = tie_break_keys_at(seed, np.full(scores.shape[1], evalset.users[r]),
                                 np.arange(scores.shape[1]))
        candidates = ~foldin[r] & ~targets[r]
        for t in np.flatnonzero(targets[r]):
            wins = (scores[r] > scores[r, t]) | ((scores[r] == scores[r, t]) & (keys < keys[t]))
            out[(r, int(t))] = 1 + int(np.sum(wins & candidates))
    return out


def rank_dict(ranked) -> dict:
    """{(row, item): rank} of a RankTable or BatchRanks."""
    return {(int(r), int(i)): int(k)
            for r, i, k in zip(ranked.rows, ranked.items, ranked.ranks, strict=True)}


def signed_rank_null(diff: np.ndarray) -> tuple[np.ndarray, float, dict[str, float]]:
    """Wilcoxon's signed-rank test by enumeration (no zero differences, no ties): the ranks of
    |diff|, W+ (the sum of the ranks of the positive differences) and its exact p-value for
    each alternative, from W+ under every one of the 2^n sign patterns (H0's law)."""
    ranks = stats.rankdata(np.abs(diff))
    w_plus = float(ranks[diff > 0].sum())
    sums = np.array([sum(r for r, s in zip(ranks, signs, strict=True) if s)
                     for signs in np.ndindex(*(2,) * len(diff))])
    p = {"greater": float(np.mean(sums >= w_plus)), "less": float(np.mean(sums <= w_plus))}
    p["two-sided"] = min(1.0, 2 * min(p["greater"], p["less"]))
    return ranks, w_plus, p


def tail_pvalues(law, statistic: float) -> dict[str, float]:
    """P-values of `statistic` under a symmetric frozen scipy law (stats.norm(), stats.t(df)),
    one per alternative."""
    return {"two-sided": 2 * law.sf(abs(statistic)), "less": law.cdf(statistic),
            "greater": law.sf(statistic)}


def fair_binomial_pvalue(k: int, n: int, alternative: str) -> float:
    """P-value of k successes in n fair trials, summed from the pmf written out (two-sided:
    every outcome no more likely than k)."""
    pmf = [math.comb(n, i) / 2**n for i in range(n + 1)]
    if alternative == "greater":
        return sum(pmf[k:])
    if alternative == "less":
        return sum(pmf[: k + 1])
    return min(1.0, sum(p for p in pmf if p <= pmf[k] * (1 + 1e-7)))

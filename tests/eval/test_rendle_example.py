"""Rendle's running example (Rendle 2019): the exact and sampled metrics of its three algorithms."""

from __future__ import annotations

import numpy as np
import pytest

from linrec.eval.expected import (
    expected_sampled_metric,
    sampled_metric_gains,
    sampled_metric_variance,
)
from linrec.eval.metrics import rank_gain
from linrec.eval.negatives import draw_negatives
from linrec.eval.sampled_ranks import sampled_ranks_from_scores
from linrec.eval.simulate import simulate_sampled_ranks

N_ITEMS = 10_000
N_SAMPLED = 99  # m
ALGOS = {
    "A": [100, 100, 100, 100, 100],
    "B": [40, 40, 8437, 9266, 4482],
    "C": [212, 2, 743, 5342, 1548],
}
#: (metric, K) of the example: AUC, unbounded AP and NDCG, Recall@10
METRICS = [("auc", None), ("ap", None), ("ndcg", None), ("recall", 10)]

# Rendle 2019, the running example printed exact table (3 decimals) and 4-decimal values computed
# from its definitions
EXACT_PRINTED = {
    "A": (0.990, 0.010, 0.150, 0.000),
    "B": (0.555, 0.010, 0.122, 0.000),
    "C": (0.843, 0.101, 0.208, 0.200),
}
EXACT_4DEC = {"A": (0.9901, 0.0100, 0.1502), "B": (0.5548, 0.0101, 0.1217),
              "C": (0.8431, 0.1014, 0.2080)}
# Rendle 2019, the running example exact expectations computed from the binomial law and single-run
# standard deviations (binomial, m = 99)
EXPECTED = {
    "A": (0.9901, 0.6366, 0.7290, 1.0000),
    "B": (0.5548, 0.3407, 0.4473, 0.4000),
    "C": (0.8431, 0.3262, 0.4600, 0.5694),
}
EXPECTED_SD = {
    "A": (0.0045, 0.1304, 0.0978, 0.0001),
    "B": (0.0136, 0.0711, 0.0528, 0.0000),
    "C": (0.0138, 0.0509, 0.0395, 0.0902),
}
# Rendle 2019, the running example printed Monte Carlo table (1000 repetitions): mean, std
MC_PRINTED = {
    "A": ((0.990, 0.004), (0.630, 0.129), (0.724, 0.097), (1.000, 0.000)),
    "B": ((0.555, 0.014), (0.336, 0.073), (0.444, 0.054), (0.400, 0.000)),
    "C": ((0.843, 0.014), (0.325, 0.050), (0.460, 0.039), (0.567, 0.092)),
}


def _exact_metric(ranks: np.ndarray, metric: str, k: int | None) -> float:
    ranks = np.asarray(ranks)
    if metric == "auc":  # Rendle 2019, eqs. 9–15: AUC = (N - R)/(N - 1)
        return float(np.mean((N_ITEMS - ranks) / (N_ITEMS - 1)))
    gains = rank_gain(metric, ranks)
    if k is not None:
        gains = gains * (ranks <= k)
    return float(gains.mean())


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_exact_table(algo: str) -> None:
    ranks = np.array(ALGOS[algo])
    values = [_exact_metric(ranks, m, k) for m, k in METRICS]
    np.testing.assert_allclose(values, EXACT_PRINTED[algo], atol=5e-4 + 1e-12)
    np.testing.assert_allclose(values[:3], EXACT_4DEC[algo], atol=5e-5 + 1e-12)
    # AUC is unbiased: the expected sampled AUC equals the exact AUC
    sampled_auc = expected_sampled_metric(ranks, N_ITEMS, N_SAMPLED + 1, "auc").mean()
    assert abs(sampled_auc - values[0]) < 1e-12


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_expected_sampled_metrics(algo: str) -> None:
    ranks = np.array(ALGOS[algo])
    for (metric, k), want, want_sd in zip(METRICS, EXPECTED[algo], EXPECTED_SD[algo],
                                          strict=True):
        mean = expected_sampled_metric(ranks, N_ITEMS, N_SAMPLED + 1, metric, k).mean()
        var = sampled_metric_variance(ranks, N_ITEMS, N_SAMPLED + 1, metric, k)
        sd = np.sqrt(var.sum()) / len(ranks)
        assert abs(mean - want) <= 5e-5 + 1e-12, (metric, mean, want)
        assert abs(sd - want_sd) <= 5e-5 + 1e-12, (metric, sd, want_sd)


def test_hypergeometric_values() -> None:
    """Rendle 2019, the running example: without replacement A AP 0.6358, A NDCG 0.7284, C R@10
    0.5695."""
    n = N_SAMPLED + 1
    hyper = "hypergeometric"
    assert abs(expected_sampled_metric(ALGOS["A"], N_ITEMS, n, "ap", scheme=hyper).mean()
               - 0.6358) < 5e-5
    assert abs(expected_sampled_metric(ALGOS["A"], N_ITEMS, n, "ndcg", scheme=hyper).mean()
               - 0.7284) < 5e-5
    assert abs(expected_sampled_metric(ALGOS["C"], N_ITEMS, n, "recall", 10, hyper).mean()
               - 0.5695) < 5e-5


def _run_metrics(sampled: np.ndarray) -> list[np.ndarray]:
    """Per-run mean over the 5 instances of each metric: sampled (runs, 5) -> list of (runs,)."""
    n = N_SAMPLED + 1
    return [sampled_metric_gains(metric, n, k)[sampled - 1].mean(axis=1) for metric, k in METRICS]


def _check_monte_carlo(algo: str, per_run: list[np.ndarray]) -> None:
    runs = len(per_run[0])
    for j, values in enumerate(per_run):
        exact_mean, exact_sd = EXPECTED[algo][j], EXPECTED_SD[algo][j]
        se = max(exact_sd, 1e-4) / np.sqrt(runs)
        # within 3 standard errors of the exact expectation (4-decimal rounding allowed)
        assert abs(values.mean() - exact_mean) <= 3 * se + 5e-5, (algo, j, values.mean())
        # spread: the sd of an sd estimate over 1000 runs is ~2.2 % of sd
        assert abs(values.std() - exact_sd) <= 0.1 * exact_sd + 2e-4, (algo, j, values.std())
        # the printed MC table is itself one draw: consistent within 3 s.e. + print rounding
        mc_mean, mc_sd = MC_PRINTED[algo][j]
        assert abs(mc_mean - exact_mean) <= 3 * se + 5e-4
        assert abs(mc_sd - exact_sd) <= 0.1 * exact_sd + 1e-3


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_monte_carlo_simulated(algo: str) -> None:
    rng = np.random.default_rng(20191205)
    ranks = np.tile(np.array(ALGOS[algo]), (1000, 1))
    sampled = simulate_sampled_ranks(ranks, N_ITEMS, N_SAMPLED + 1, replace=True, rng=rng)
    _check_monte_carlo(algo, _run_metrics(sampled))


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_monte_carlo_real_item_sampling(algo: str) -> None:
    """The same Monte Carlo with real sampled items ranked by scores (one catalogue of 10,000
    items ordered by score; instance i's target is the item at global rank R_i)."""
    ranks = np.array(ALGOS[algo])
    scores = -np.arange(N_ITEMS, dtype=np.float64)[None, :].repeat(len(ranks), axis=0)
    keys = np.zeros_like(scores)
    target_rows = np.tile(np.arange(len(ranks)), 1000)
    target_items = ranks[target_rows] - 1  # item j has global rank j + 1
    negatives = draw_negatives(7, 0, target_rows, target_items, N_ITEMS, N_SAMPLED + 1)
    sampled = sampled_ranks_from_scores(scores, keys, target_rows, target_items, negatives)
    _check_monte_carlo(algo, _run_metrics(sampled.reshape(1000, len(ranks))))


# Rendle 2019, the running example "Order of algorithms vs m" (exact expectations computed from the
# binomial law, binomial)
ORDERS = {
    50: {"ap": "ACB", "ndcg": "ACB", "recall": "ACB"},
    200: {"ap": "ABC", "ndcg": "ACB", "recall": "ACB"},
    500: {"ap": "CAB", "ndcg": "ACB", "recall": "ABC"},
    1000: {"ap": "CBA", "ndcg": "CAB", "recall": "ABC"},
    5000: {"ap": "CBA", "ndcg": "CAB", "recall": "CBA"},
}


@pytest.mark.parametrize("m", sorted(ORDERS))
def test_order_vs_sample_size(m: int) -> None:
    for metric, want in ORDERS[m].items():
        k = 10 if metric == "recall" else None
        values = {a: expected_sampled_metric(r, N_ITEMS, m + 1, metric, k).mean()
                  for a, r in ALGOS.items()}
        order = "".join(sorted(values, key=lambda a: -values[a]))
        assert order == want, (m, metric, values)
    # AUC always gives the exact order A > C > B
    auc = {a: expected_sampled_metric(r, N_ITEMS, m + 1, "auc").mean() for a, r in ALGOS.items()}
    assert "".join(sorted(auc, key=lambda a: -auc[a])) == "ACB"

"""Average relative error, winner accuracy and order agreement (Li et al. 2023, Tables 1–11;
docs/concepts/sampled.md)."""

import numpy as np
import pytest
from scipy.stats import kendalltau

from linrec.errors import ConfigError
from linrec.eval.estimators.accuracy import (
    average_relative_error,
    order_agreement,
    winner_accuracy,
)


def test_average_relative_error_by_hand():
    true = np.array([0.1, 0.2, 0.0, 0.4])
    est = np.array([0.12, 0.1, 0.3, 0.4])
    # K=1: 20 %, K=2: 50 %, K=3: T = 0 contributes 0, K=4: 0 %; mean over 4 K
    assert average_relative_error(est, true, ks=range(1, 5)) == pytest.approx(17.5, abs=1e-12)
    assert average_relative_error(est, true, ks=[2]) == pytest.approx(50.0, abs=1e-12)


def test_average_relative_error_default_is_k_1_to_50():
    rng = np.random.default_rng(0)
    true = rng.random(60) + 0.1
    est = true * (1 + rng.normal(scale=0.1, size=60))
    expected = 100 * np.mean(np.abs(est[:50] - true[:50]) / true[:50])
    assert average_relative_error(est, true) == pytest.approx(expected, rel=1e-14)
    with pytest.raises(ConfigError, match="ks must lie in"):
        average_relative_error(est[:40], true[:40])


def test_average_relative_error_takes_whole_curves_and_refuses_ks_outside_them():
    true, est = np.array([0.1, 0.2, 0.4]), np.array([0.2, 0.2, 0.2])
    # the last K of the curve is allowed; one past it, K = 0 and no K are refused
    assert average_relative_error(est, true, ks=[3]) == pytest.approx(50.0, abs=1e-12)
    assert average_relative_error(est, true, ks=range(1, 4)) == pytest.approx(50.0, abs=1e-12)
    for ks in ([4], [0], [0, 1], []):
        with pytest.raises(ConfigError, match="ks must lie in"):
            average_relative_error(est, true, ks=ks)


def test_average_relative_error_of_integer_curves_and_float_ks():
    """Counts (hits) as integer curves, and K as YAML may give them (20.0): the same numbers
    as float64 curves and integer K."""
    true, est = np.array([1, 2, 4]), np.array([1.5, 2.0, 3.0])
    assert average_relative_error(est, true, ks=[1.0, 2.0, 3.0]) == pytest.approx(
        100 * (0.5 + 0.0 + 0.25) / 3, abs=1e-12)
    assert average_relative_error(np.array([2, 2, 3]), true, ks=[1, 3]) == pytest.approx(
        100 * (1.0 + 0.25) / 2, abs=1e-12)


def test_winner_accuracy_counts_matching_argmax():
    true = np.array([0.30, 0.35, 0.32])
    est = np.array([
        [0.31, 0.36, 0.30],  # right
        [0.40, 0.36, 0.30],  # wrong
        [0.10, 0.20, 0.15],  # right
        [0.10, 0.20, 0.25],  # wrong
        [0.30, 0.31, 0.30],  # right
    ])
    assert winner_accuracy(est, true) == 3
    with pytest.raises(ConfigError, match="3 models per repeat but true_values has 2"):
        winner_accuracy(est[:, :3], true[:2])


def test_order_agreement_by_hand():
    true = np.array([0.30, 0.35, 0.32, 0.10])  # order 1 > 2 > 0 > 3
    est = np.array([
        [0.31, 0.36, 0.33, 0.05],  # the exact order: τ = 1
        [0.05, 0.36, 0.33, 0.31],  # 0 and 3 swapped: 5 of 6 pairs concordant, τ = 4/6
        [0.35, 0.30, 0.32, 0.40],  # reversed: τ = -1
        [0.20, 0.20, 0.20, 0.20],  # all tied: τ = 0
    ])
    tau, same = order_agreement(est, true)
    assert tau == pytest.approx((1 + 4 / 6 - 1 + 0) / 4, abs=1e-15)
    assert same == 1
    with pytest.raises(ConfigError, match="two or more"):
        order_agreement(est[:, :1], true[:1])


def test_order_agreement_of_many_repeats_that_tie_every_model_is_zero():
    """τ = 0 for each of 2 000 repeats whose estimates are all equal (no untied pair), set
    explicitly rather than left to whatever memory the division would not write."""
    tau, same = order_agreement(np.full((2000, 3), 0.5), np.array([0.3, 0.1, 0.2]))
    assert tau == 0.0 and same == 0


def test_order_agreement_is_scipys_tau_b_with_ties():
    rng = np.random.default_rng(3)
    true = np.round(rng.random(9), 1)  # ties in the exact values too
    est = np.round(true + rng.normal(scale=0.15, size=(50, 9)), 1)
    expected = np.mean([kendalltau(row, true).statistic for row in est])
    tau, same = order_agreement(est, true)
    assert tau == pytest.approx(expected, abs=1e-12)
    assert same == sum(bool(np.all(np.sign(row[:, None] - row) == np.sign(true[:, None] - true)))
                       for row in est)


def test_order_agreement_of_two_models_and_of_unsigned_values():
    """Two models (one pair: τ = ±1), and values given as unsigned integers (hit counts), whose
    differences must not wrap around."""
    true = np.array([0.2, 0.1])
    est = np.array([[0.3, 0.1], [0.4, 0.2], [0.1, 0.3], [0.5, 0.5]])
    tau, same = order_agreement(est, true)
    assert tau == pytest.approx((1 + 1 - 1 + 0) / 4, abs=1e-15) and same == 2
    hits = np.array([[3, 5, 4], [5, 3, 4]], dtype=np.uint8)
    exact = np.array([3, 5, 4], dtype=np.uint8)
    tau, same = order_agreement(hits, exact)
    assert tau == pytest.approx((1 + kendalltau([5, 3, 4], [3, 5, 4]).statistic) / 2)
    assert same == 1
    assert winner_accuracy(hits, exact) == 1

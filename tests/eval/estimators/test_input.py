"""Input checks of the estimators (docs/concepts/sampled.md): a sampled rank out of range is named
with its range, and a per-target sample-size array of one common size is accepted."""

from __future__ import annotations

import numpy as np
import pytest

from linrec.errors import ConfigError
from linrec.eval.estimators import estimate
from tests.eval.estimators.conftest import draw, scipy_law


@pytest.mark.parametrize("bad", [0, 21, -3])
def test_rank_out_of_range_names_value_and_range(bad):
    sampled = np.array([1, 2, bad, 4])
    with pytest.raises(ConfigError, match=rf"sampled rank {bad} .*\[1, 20\]"):
        estimate("mle", sampled, n_items=400, sample_size=20)


def test_homogeneous_size_array_is_accepted():
    _, sampled = draw(400, 20, 300, seed=1)
    a = estimate("bv", sampled, n_items=400, sample_size=np.full(300, 20))
    b = estimate("bv", sampled, n_items=400, sample_size=20)
    np.testing.assert_array_equal(a.p_hat, b.p_hat)


def test_a_given_prior_is_normalised_and_checked():
    from linrec.eval.estimators._input import normalise_distribution

    np.testing.assert_array_equal(normalise_distribution([1, 0, 3], 3, "prior"),
                                  [0.25, 0.0, 0.75])  # zeros allowed, counts normalised
    halves = normalise_distribution(np.array([1, 2], dtype=np.float32), 2, "prior")
    assert halves.dtype == np.float64 and abs(halves[0] - 1 / 3) < 1e-16  # not float32's 1/3
    for bad in ([1.0, -0.5, 1.0], [1.0, np.nan, 1.0], [1.0, np.inf, 1.0], [0.0, 0.0, 0.0]):
        with pytest.raises(ConfigError, match="prior must be finite, >= 0 and have positive "
                                              "mass"):
            normalise_distribution(bad, 3, "prior")
    with pytest.raises(ConfigError, match=r"prior must have length n_items=3, got shape \(2,\)"):
        normalise_distribution([0.5, 0.5], 3, "prior")


def test_selected_columns_of_the_law_default_to_binomial_and_check_their_ranks():
    from linrec.eval.conditional import conditional_columns

    expected = scipy_law(40, 10)[:, [0, 4, 9]]
    np.testing.assert_allclose(conditional_columns(40, 10, np.array([1, 5, 10])), expected,
                               rtol=1e-10, atol=1e-300)
    for ranks in ([0, 3], [3, 11]):
        with pytest.raises(ConfigError, match=r"sampled ranks must lie in \[1, 10\]"):
            conditional_columns(40, 10, np.array(ranks))


def test_sampled_ranks_may_be_whole_floats_and_anything_else_is_named():
    """Ranks given as whole-number floats become the same int64 ranks; a fractional or
    non-finite rank is refused naming the first such value; the ranks must be one non-empty
    vector; a common sample size of 1 is allowed, a fractional one refused."""
    from linrec.eval.estimators._input import check_sampled_ranks, common_sample_size

    got = check_sampled_ranks(np.array([1.0, 3.0, 2.0]), 3)
    assert got.dtype == np.int64 and got.tolist() == [1, 3, 2]
    got = check_sampled_ranks(np.array([2, 1], dtype=np.int32), np.array([2.0, 2.0]))
    assert got.dtype == np.int64 and got.tolist() == [2, 1]
    for ranks, bad in (([1.0, 2.5, 3.7], "2.5"), ([1.0, np.nan, 2.5], "nan"),
                       ([2.0, 1.0, np.inf], "inf")):
        with pytest.raises(ConfigError, match=f"sampled rank {bad} is not an integer"):
            check_sampled_ranks(np.array(ranks), 5)
    for ranks in (np.array([[1, 2]]), np.array([], dtype=np.int64)):
        with pytest.raises(ConfigError, match="non-empty 1-d"):
            check_sampled_ranks(ranks, 5)
    assert common_sample_size(1, "mle") == 1
    with pytest.raises(ConfigError, match="sample_size=2.5 must be an integer"):
        common_sample_size(2.5, "mle")

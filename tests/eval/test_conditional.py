"""P(r | R) matrices against scipy.stats and their invariants (Li et al. 2020, eq. 6;
docs/concepts/sampled.md)."""

import numpy as np
import pytest
from scipy import stats

from linrec.errors import ConfigError, MemoryBudgetError
from linrec.eval.conditional import (
    band_half_width,
    conditional_band,
    conditional_matrix,
    conditional_operator,
)


def _scipy_reference(n_items: int, sample_size: int, scheme: str) -> np.ndarray:
    global_ranks = np.arange(1, n_items + 1)[:, None]
    sampled_ranks = np.arange(1, sample_size + 1)[None, :]
    if scheme == "binomial":
        theta = (global_ranks - 1) / (n_items - 1)
        return stats.binom.pmf(sampled_ranks - 1, sample_size - 1, theta)
    # scipy's hypergeom(M, n, N): population, successes, draws (Li et al. 2020)
    return stats.hypergeom.pmf(sampled_ranks - 1, n_items - 1, global_ranks - 1, sample_size - 1)


@pytest.mark.parametrize("scheme", ["binomial", "hypergeometric"])
@pytest.mark.parametrize("n_items,sample_size", [(2, 2), (7, 3), (300, 20), (1000, 100), (60, 60)])
def test_matches_scipy_pmf(scheme, n_items, sample_size):
    a = conditional_matrix(n_items, sample_size, scheme)
    ref = _scipy_reference(n_items, sample_size, scheme)
    assert a.shape == (n_items, sample_size) and a.dtype == np.float64
    np.testing.assert_allclose(a, ref, rtol=1e-9, atol=1e-14)


def test_binomial_sample_larger_than_catalogue():
    # with replacement the sample may exceed the catalogue
    a = conditional_matrix(5, 12, "binomial")
    np.testing.assert_allclose(a, _scipy_reference(5, 12, "binomial"), rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("scheme", ["binomial", "hypergeometric"])
def test_rows_sum_to_one_large_sample(scheme):
    # docs/concepts/sampled.md: row sums to 1e-10 up to the adaptive sizes (n = 3200)
    a = conditional_matrix(4000, 3200, scheme)
    assert np.abs(a.sum(axis=1) - 1.0).max() < 1e-10
    # edge rows: θ = 0 puts all mass at r = 1, θ = 1 at r = n (docs/concepts/sampled.md)
    assert a[0, 0] == 1.0 and a[-1, -1] == 1.0


def test_log_form_is_log_of_matrix():
    log_a = conditional_matrix(300, 20, "binomial", log=True)
    a = conditional_matrix(300, 20, "binomial")
    np.testing.assert_allclose(np.exp(log_a), a, rtol=1e-13, atol=0)


@pytest.mark.parametrize("scheme", ["binomial", "hypergeometric"])
def test_band_equals_dense(scheme):
    n_items, sample_size = 3000, 800
    band = conditional_band(n_items, sample_size, scheme)
    width = 2 * band_half_width(sample_size, 1e-15) + 1
    assert band.nnz == n_items * width < n_items * sample_size
    dense = conditional_matrix(n_items, sample_size, scheme)
    np.testing.assert_allclose(band.toarray(), dense, rtol=0, atol=1e-15)
    assert np.abs(band.sum(axis=1) - 1.0).max() < 1e-12


def test_hoeffding_half_width_bounds_dropped_mass():
    # the mass outside the band is at most the tail mass, checked on the worst row θ = 1/2
    sample_size, tail = 401, 1e-6
    h = band_half_width(sample_size, tail)
    pmf = stats.binom.pmf(np.arange(sample_size), sample_size - 1, 0.5)
    mean = (sample_size - 1) / 2
    outside = pmf[np.abs(np.arange(sample_size) - mean) > h].sum()
    assert 0 < outside <= tail


def test_operator_is_cached_read_only_and_banded_when_large():
    small = conditional_operator(500, 20)
    assert conditional_operator(500, 20) is small and not small.flags.writeable
    large = conditional_operator(20000, 3200)
    assert large.shape == (20000, 3200) and large.nnz < 20000 * 3200 / 4


@pytest.mark.parametrize(
    "args",
    [(1, 5, "binomial"), (100, 0, "binomial"), (10, 20, "hypergeometric"), (100, 5, "poisson")],
)
def test_bad_sizes_raise_config_error(args):
    with pytest.raises(ConfigError):
        conditional_matrix(*args)


def test_dense_memory_budget():
    with pytest.raises(MemoryBudgetError, match="conditional_band"):
        conditional_matrix(200_000, 1000)


def test_binomial_pmf_used_by_estimators_matches_scipy():
    # the estimators see P(r|R) only through conditional_operator; spot-check one row
    row = conditional_operator(400, 20)[123]
    np.testing.assert_allclose(row, stats.binom.pmf(np.arange(20), 19, 123 / 399), rtol=1e-10)


@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.float64])
def test_log_pmf_is_scipys_law_pair_by_pair(dtype):
    """log P(r | R) itself, not renormalised: its exponent equals scipy's binomial (the
    default scheme) and hypergeometric pmf for every (R, r), impossible pairs 0, whatever the
    integer or float dtype the ranks come in."""
    from linrec.eval.conditional import log_pmf

    n_items, sample_size = 40, 8
    big_r = np.arange(1, n_items + 1)[:, None]
    r = np.arange(1, sample_size + 1)[None, :]
    binomial = stats.binom.pmf(r - 1, sample_size - 1, (big_r - 1) / (n_items - 1))
    hyper = stats.hypergeom.pmf(r - 1, n_items - 1, big_r - 1, sample_size - 1)
    got = np.exp(log_pmf(big_r.astype(dtype), r.astype(dtype), n_items, sample_size))
    np.testing.assert_allclose(got, binomial, rtol=1e-12, atol=1e-300)
    got = np.exp(log_pmf(big_r.astype(dtype), r.astype(dtype), n_items, sample_size,
                         "hypergeometric"))
    np.testing.assert_allclose(got, hyper, rtol=1e-12, atol=1e-300)
    # impossible pairs (the top item sampled below rank 1, the last item above rank n) are
    # below -1e299 in log space, not a small probability
    impossible = log_pmf(big_r.astype(dtype), r.astype(dtype), n_items, sample_size)[binomial == 0]
    assert impossible.size and np.all(impossible <= -1e299)


def test_the_dense_law_refuses_more_than_its_memory_limit_and_a_tail_outside_0_1(monkeypatch):
    """conditional_matrix builds a law of exactly DENSE_BYTES_LIMIT bytes (8 per entry) and
    refuses one byte less of limit; band_half_width takes a tail mass strictly between 0 and
    1."""
    import linrec.eval.conditional as conditional

    monkeypatch.setattr(conditional, "DENSE_BYTES_LIMIT", 8 * 30 * 6)
    assert conditional.conditional_matrix(30, 6).shape == (30, 6)
    monkeypatch.setattr(conditional, "DENSE_BYTES_LIMIT", 8 * 30 * 6 - 1)
    with pytest.raises(MemoryBudgetError):
        conditional.conditional_matrix(30, 6)
    for tail in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(ConfigError):
            band_half_width(20, tail)
    assert band_half_width(20, 0.999) >= 0


@pytest.mark.parametrize("n_items, sample_size, tail", [(500, 100, 1e-15), (97, 40, 1e-6),
                                                         (1000, 7, 1e-15)])
def test_each_band_row_is_the_window_around_its_mean(n_items, sample_size, tail):
    """Row R of the band stores exactly the sampled ranks of the window of width
    w = min(n, 2h + 1), h = ceil(sqrt((n − 1) ln(2/δ) / 2)) (Hoeffding), centred on the nearest
    rank to the mean 1 + (n − 1)(R − 1)/(N − 1) and moved inside [1, n]; its values are scipy's
    law renormalised over that window; the array has the law's shape."""
    band = conditional_band(n_items, sample_size, "binomial", tail)
    half = int(np.ceil(np.sqrt((sample_size - 1) * np.log(2 / tail) / 2)))
    assert band_half_width(sample_size, tail) == half
    width = min(sample_size, 2 * half + 1)
    assert band.shape == (n_items, sample_size)
    for big_r in range(1, n_items + 1):
        mean = 1 + (sample_size - 1) * (big_r - 1) / (n_items - 1)
        first = min(max(int(np.rint(mean)) - (width - 1) // 2, 1), sample_size - width + 1)
        columns = np.arange(first, first + width)
        row = band[[big_r - 1]]
        np.testing.assert_array_equal(row.indices + 1, columns)
        law = stats.binom.pmf(columns - 1, sample_size - 1, (big_r - 1) / (n_items - 1))
        np.testing.assert_allclose(row.data, law / law.sum(), rtol=1e-9, atol=1e-300)


def test_the_operator_is_banded_exactly_when_large_and_the_band_is_narrow(monkeypatch):
    """Unforced, the operator is the band when N·n exceeds BAND_ABOVE_ENTRIES and the window
    2h + 1 at tail 1e-15, h = ceil(sqrt((n − 1) ln(2e15) / 2)), is under three quarters of n;
    the dense law otherwise: at N·n equal to the threshold, and for n = 129 and 132 (windows of
    97 and 99, against 96.75 and exactly 99), where n = 130 and 133 are banded."""
    import scipy.sparse as sp

    import linrec.eval.conditional as conditional
    from linrec.eval.conditional import conditional_operator

    def narrow(size: int) -> bool:
        return 2 * int(np.ceil(np.sqrt((size - 1) * np.log(2e15) / 2))) + 1 < 0.75 * size

    assert [narrow(n) for n in (129, 130, 132, 133, 400)] == [False, True, False, True, True]
    monkeypatch.setattr(conditional, "BAND_ABOVE_ENTRIES", 1000 * 400)
    assert not sp.issparse(conditional_operator(1000, 400))  # at the threshold: dense
    assert sp.issparse(conditional_operator(1001, 400))
    monkeypatch.setattr(conditional, "BAND_ABOVE_ENTRIES", 0)
    for size in (129, 130, 132, 133):
        assert sp.issparse(conditional_operator(300, size)) == narrow(size), size


def test_a_sample_of_one_item_is_always_ranked_first():
    """n = 1 (the target alone): P(r = 1 | R) = 1 for every R, dense and banded; the band has
    no half-width."""
    assert band_half_width(1, 1e-15) == 0
    np.testing.assert_array_equal(conditional_matrix(12, 1), np.ones((12, 1)))
    band = conditional_band(12, 1)
    assert band.shape == (12, 1)
    np.testing.assert_array_equal(band.toarray(), np.ones((12, 1)))

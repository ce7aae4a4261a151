"""The linear algebra the estimators share (Krichene & Rendle 2020; Li et al. 2023, eq. 14;
 docs/concepts/sampled.md): the implied distribution P̂ = D A H⁻¹ P~ of BV, MN and LS equals the
weights solved from the papers' formulas, the symmetric solve falls back to least squares below
machine precision without touching the warnings filters, and the banded P(r|R) of large N·n gives
the dense results (MLE, BV, MN, MES)."""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.eval.conditional import conditional_matrix
from linrec.eval.estimators import estimate
from linrec.eval.estimators._linalg import solve_symmetric
from linrec.eval.estimators.em import mes
from tests.eval.estimators.conftest import (
    N_ITEMS,
    N_TARGETS,
    SAMPLE_SIZE,
    direct_weights,
    draw,
    metric_target,
)


@pytest.mark.parametrize("name", ["bv", "mn", "ls"])
@pytest.mark.parametrize("metric", ["recall", "ndcg", "ap"])
def test_implied_distribution_identity(small, name, metric):
    sampled, hist, prior, cond = small
    result = estimate(name, sampled, n_items=N_ITEMS, sample_size=SAMPLE_SIZE, prior=prior)
    for k in (1, 5, 20, 50):
        target = metric_target(metric, k)
        x = direct_weights(name, cond, prior, 0.01, N_TARGETS, target)
        scale = _ls_term_scale(cond, prior, hist, target) if name == "ls" else 1.0
        assert abs(hist @ x - result.p_hat @ target) <= 1e-12 * max(scale, 1.0)


def _ls_term_scale(cond, prior, hist, target):
    """Σ_i |(Uᵀ√D b)_i (Vᵀ P~)_i / s_i|: the size of the terms that cancel in P~ᵀx for LS, whose
    singular values span ~1e-9..1 (Krichene & Rendle 2020), hence the scale of its rounding
    error."""
    u, s, vt = np.linalg.svd(np.sqrt(prior)[:, None] * cond, full_matrices=False)
    return np.abs((u.T @ (np.sqrt(prior) * target)) * (vt @ hist) / s).sum()


def _ill_and_well_conditioned(n=40, seed=0):
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    ill = (q * np.r_[np.ones(n - 1), 1e-19]) @ q.T  # rcond ~ 1e-19 < eps
    well = (q * np.linspace(1.0, 2.0, n)) @ q.T
    return (ill + ill.T) / 2, (well + well.T) / 2, rng.normal(size=n)


def test_solve_symmetric_falls_back_below_machine_precision_without_warning_filters(monkeypatch):
    """Regression: solve_symmetric switched warnings filters (`warnings.catch_warnings`, not
    thread-safe); under the sampled block's threads that leaked a process-wide 'error' filter for
    LinAlgWarning and let an ill-conditioned solve through at random. It must decide from LAPACK's
    condition estimate alone."""
    ill, well, rhs = _ill_and_well_conditioned()
    x, method = solve_symmetric(well, rhs)
    assert method == "solve(sym)"
    np.testing.assert_allclose(x, np.linalg.solve(well, rhs), rtol=1e-12)
    x, method = solve_symmetric(ill, rhs)
    assert method == "lstsq"
    np.testing.assert_allclose(x, np.linalg.lstsq(ill, rhs, rcond=None)[0], rtol=1e-6, atol=1e-9)
    assert solve_symmetric(np.zeros((3, 3)), np.ones(3))[1] == "lstsq"

    before = list(warnings.filters)
    with ThreadPoolExecutor(4) as pool:
        methods = list(pool.map(lambda _: (solve_symmetric(ill, rhs)[1],
                                           solve_symmetric(well, rhs)[1]), range(400)))
    assert set(methods) == {("lstsq", "solve(sym)")}
    assert list(warnings.filters) == before

    def forbidden(*args, **kwargs):
        raise AssertionError("warnings.catch_warnings is not thread-safe")

    monkeypatch.setattr(warnings, "catch_warnings", forbidden)
    assert solve_symmetric(ill, rhs)[1] == "lstsq"


def test_banded_operator_gives_the_dense_results():
    # large N·n use the banded CSR form of P(r|R) (docs/concepts/sampled.md); same estimates
    from linrec.eval.conditional import conditional_band
    from linrec.eval.estimators.bv import bv
    from linrec.eval.estimators.em import mle
    from linrec.eval.estimators.mn import mn

    n_items, sample_size = 2000, 400
    _, sampled = draw(n_items, sample_size, 4000, seed=9)
    hist = np.bincount(sampled - 1, minlength=sample_size) / len(sampled)
    dense, band = conditional_matrix(n_items, sample_size), conditional_band(n_items, sample_size)
    assert band.nnz < 0.45 * dense.size
    p_dense, trace_dense, _ = mle(dense, hist, n_iter=30)
    p_band, trace_band, _ = mle(band, hist, n_iter=30)
    np.testing.assert_allclose(p_band, p_dense, rtol=1e-10, atol=1e-18)
    np.testing.assert_allclose(trace_band, trace_dense, rtol=1e-12)
    for prior in (np.full(n_items, 1.0 / n_items), p_dense):
        np.testing.assert_allclose(bv(band, hist, prior)[0], bv(dense, hist, prior)[0],
                                   rtol=1e-7, atol=1e-12)
        np.testing.assert_allclose(mn(band, hist, prior, 4000)[0], mn(dense, hist, prior, 4000)[0],
                                   rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(mes(band, hist, 400.0, solver="dual")[0],
                               mes(dense, hist, 400.0, solver="dual")[0], rtol=1e-8, atol=1e-14)


def test_band_blocks_hold_the_band_and_the_banded_em_gives_the_dense_em():
    """The dense row blocks of a banded A are A itself (every entry, once), and the EM step on
    them, batched and with sampled ranks no sample observed, gives the dense EM's estimate."""
    from linrec.eval.conditional import conditional_band, conditional_operator
    from linrec.eval.estimators._linalg import band_blocks
    from linrec.eval.estimators.em import mle

    n_items, sample_size = 3000, 500
    band = conditional_band(n_items, sample_size)
    rebuilt = np.full((n_items, sample_size), np.nan)
    bands = band_blocks(band, block_bytes=1 << 16)
    assert len(bands.blocks) > 10
    for (r0, r1), (c0, c1), block in bands:
        assert np.isnan(rebuilt[r0:r1, c0:c1]).all()  # no entry is covered twice
        rebuilt[r0:r1, c0:c1] = block
    want = band.toarray()
    np.testing.assert_array_equal(np.where(np.isnan(rebuilt), 0.0, rebuilt), want)
    assert np.all(np.isnan(rebuilt) <= (want == 0))  # every stored entry lies in a block

    dense = conditional_matrix(n_items, sample_size)
    hists = np.zeros((sample_size, 3))
    for b in range(3):
        _, sampled = draw(n_items, sample_size, 300, seed=20 + b)
        hists[:, b] = np.bincount(sampled - 1, minlength=sample_size) / len(sampled)
    hists[:40, 1] = 0.0  # a sample that never saw the top ranks
    hists[:, 1] /= hists[:, 1].sum()
    assert (hists == 0).any(axis=1).any() and (hists == 0).all(axis=1).any()
    p_dense, trace_dense, _ = mle(dense, hists, n_iter=25)
    p_band, trace_band, _ = mle(band, hists, n_iter=25)
    np.testing.assert_allclose(p_band, p_dense, rtol=1e-10, atol=1e-18)
    np.testing.assert_allclose(trace_band, trace_dense, rtol=1e-12)
    # the cached (read-only) operator keeps its blocks for the next call
    cached = conditional_operator(n_items, sample_size, banded=True)
    assert band_blocks(cached) is band_blocks(cached)


def test_solve_symmetric_takes_several_right_hand_sides_and_any_real_dtype():
    """rhs (n,) or (n, k), in float32 or integers: the solution is float64 and equals
    numpy's solve (the regular path) or lstsq in float64 (a singular matrix)."""
    rng = np.random.default_rng(3)
    half = rng.normal(size=(6, 6))
    matrix = half @ half.T + 6 * np.eye(6)
    rhs = rng.normal(size=(6, 3))
    solution, method = solve_symmetric(matrix, rhs)
    assert method == "solve(sym)" and solution.shape == (6, 3)
    np.testing.assert_allclose(solution, np.linalg.solve(matrix, rhs), rtol=1e-12, atol=1e-14)

    singular = np.ones((4, 4), dtype=np.float32) + np.diag([1, 1, 0, 0]).astype(np.float32)
    singular[2:, :] = singular[:2, :]
    singular[:, 2:] = singular[:, :2]
    b = np.array([1, 2, 1, 2], dtype=np.int64)
    solution, method = solve_symmetric(singular, b)
    expected = np.linalg.lstsq(singular.astype(np.float64), b.astype(np.float64), rcond=None)[0]
    assert method == "lstsq" and solution.dtype == np.float64
    np.testing.assert_allclose(solution, expected, rtol=1e-12, atol=1e-14)
    third = (b / 3).astype(np.float32)
    solution, _ = solve_symmetric(singular.astype(np.float64), third)
    expected = np.linalg.lstsq(singular.astype(np.float64), third.astype(np.float64),
                               rcond=None)[0]
    assert solution.dtype == np.float64
    np.testing.assert_allclose(solution, expected, rtol=1e-12, atol=1e-14)


def _band(rows: list[list[int]], n_cols: int, seed: int = 0):
    """A CSR array with the given columns in each row (ascending) and random positive values."""
    rng = np.random.default_rng(seed)
    indptr = np.cumsum([0] + [len(r) for r in rows])
    indices = np.array([column for row in rows for column in row], dtype=np.int32)
    return sp.csr_array((rng.uniform(0.1, 1.0, len(indices)), indices, indptr),
                        shape=(len(rows), n_cols))


@pytest.mark.parametrize("rows", [
    [[0, 1], [1, 2], [3, 4]],          # a band of width 2
    [[0], [2], [2], [4]],              # width 1
    [[1, 2, 3]],                       # one row
    [[0, 2], [1, 3], [2, 4]],          # two entries a row, not adjacent: not a band
    [[0, 1], [2], [3, 4]],             # rows of different widths: not a band
    [],                                # no rows
], ids=["width2", "width1", "one-row", "gapped", "ragged", "empty"])
def test_weighted_gram_of_a_sparse_operator_is_the_dense_product(rows):
    """AᵀDA of a CSR A, banded or not, weighted or not, equals the dense product; a band of
    width 1 and a single row are bands (their dense blocks are used), a gapped or ragged one
    is not."""
    from linrec.eval.estimators._linalg import band_blocks, weighted_gram

    cond = _band(rows, 5)
    dense = cond.toarray()
    weights = np.linspace(0.5, 2.0, dense.shape[0])
    np.testing.assert_allclose(weighted_gram(cond), dense.T @ dense, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(weighted_gram(cond, weights), dense.T @ (weights[:, None] * dense),
                               rtol=1e-13, atol=1e-15)
    is_band = rows and all(r == list(range(r[0], r[0] + len(rows[0]))) for r in rows)
    assert (band_blocks(cond) is not None) == bool(is_band)


def test_the_gram_of_a_cached_operator_is_computed_once_and_read_only():
    """A read-only dense A (a cached operator) has its AᵀA cached: the same array again, which
    no caller can write; a writeable A is never cached."""
    from linrec.eval.estimators._linalg import _unweighted_gram

    cond = np.random.default_rng(4).uniform(size=(7, 4))
    cond.setflags(write=False)
    gram = _unweighted_gram(cond)
    np.testing.assert_allclose(gram, cond.T @ cond, rtol=1e-13)
    assert _unweighted_gram(cond) is gram and not gram.flags.writeable
    other = cond.copy()
    other.setflags(write=False)
    assert _unweighted_gram(other) is not gram
    writeable = cond.copy()
    assert _unweighted_gram(writeable) is not _unweighted_gram(writeable)


def test_a_factorisable_system_below_machine_precision_falls_back_too():
    """An SPD matrix with one eigenvalue 1e-16 of the others' 1: LAPACK's Bunch–Kaufman
    factorises it (info 0), but its condition estimate is below the machine precision, so the
    least-squares solution is taken; the band blocks a cached operator keeps are read-only."""
    from scipy.linalg import lapack

    from linrec.eval.conditional import conditional_operator
    from linrec.eval.estimators._linalg import band_blocks

    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.normal(size=(40, 40)))
    matrix = (q * np.r_[np.ones(39), 1e-16]) @ q.T
    matrix = (matrix + matrix.T) / 2
    rhs = rng.normal(size=40)
    info = lapack.dsysv(matrix, rhs[:, None], lwork=int(lapack.dsysv_lwork(40)[0]))[3]
    assert info == 0
    x, method = solve_symmetric(matrix, rhs)
    assert method == "lstsq"
    np.testing.assert_allclose(x, np.linalg.lstsq(matrix, rhs, rcond=None)[0], rtol=1e-6,
                               atol=1e-9)
    blocks = band_blocks(conditional_operator(3000, 500, banded=True))
    assert blocks is not None and all(not block.flags.writeable for block in blocks.blocks)


def test_weighted_gram_of_a_dense_law_is_the_product_written_out():
    """AᵀWA of the dense P(r|R) for no weights, a uniform weight, positive weights with zeros
    and weights of both signs, against the product written out in the test."""
    from linrec.eval.estimators._linalg import weighted_gram

    cond = conditional_matrix(60, 12)
    rng = np.random.default_rng(4)
    cases = [None, np.full(60, 2.5), np.where(rng.random(60) < 0.3, 0.0, rng.random(60)),
             rng.normal(size=60)]
    for weights in cases:
        w = np.ones(60) if weights is None else weights
        expected = cond.T @ (w[:, None] * cond)
        np.testing.assert_allclose(weighted_gram(cond, weights), expected, rtol=1e-12,
                                   atol=1e-15)

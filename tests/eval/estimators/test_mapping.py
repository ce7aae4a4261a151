"""Mapping functions SHR@k ≈ HR@f(k) (Li et al. 2020, §3): reference values, the closed form,
monotonicity in a, and helpers."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import betaln, comb

from linrec.errors import ConfigError, DataError
from linrec.eval.estimators.mapping import (
    aligned_curves,
    alignment_errors,
    beta_mapping,
    bound_mapping,
    dataset_beta_parameter,
    fit_beta_p,
    linear_mapping,
    mapping_function,
    oracle_mapping,
)
from linrec.eval.expected import expected_sampled_curve
from linrec.eval.simulate import simulate_sampled_ranks

N_ML1M = 3706
KS = np.array([1, 2, 5, 10, 20, 50, 100])
# Li et al. 2020, eqs. 14–17 reference table, N = 3706, n = 100
TABLE = {
    "linear": [1.000, 38.424, 150.697, 337.818, 712.061, 1834.788, 3706],
    "bound": [19, 56, 168, 356, 730, 1853, 3706],
    1.0: [38.050, 75.100, 186.250, 371.500, 742.000, 1853.500, 3706],
    0.8: [34.934, 71.750, 182.839, 368.218, 739.060, 1851.654, 3706],
    0.5: [30.172, 66.637, 177.671, 363.261, 734.628, 1848.875, 3706],
    0.3685: [28.044, 64.358, 175.384, 361.075, 732.677, 1847.652, 3706],
    0.2: [25.274, 61.401, 172.435, 358.262, 730.169, 1846.083, 3706],
}


@pytest.mark.parametrize("kind", sorted(TABLE, key=str))
def test_reference_table(kind: str | float) -> None:
    if kind == "linear":
        f = mapping_function("linear", N_ML1M, 100)
    elif kind == "bound":
        f = mapping_function("bound", N_ML1M, 100)
    else:
        f = mapping_function("beta", N_ML1M, 100, a=kind)
    np.testing.assert_allclose(f[KS - 1], TABLE[kind], atol=5e-4 + 1e-9)


def test_more_reference_values() -> None:
    assert beta_mapping(N_ML1M, 1000, 1.0)[9] == pytest.approx(38.05, abs=1e-9)
    assert beta_mapping(N_ML1M, 1000, 0.5)[9] == pytest.approx(37.145, abs=5e-4)
    ks = np.array([10, 20, 50, 100, 200, 500])
    np.testing.assert_array_equal(bound_mapping(N_ML1M, 1000)[ks - 1],
                                  [35, 72, 184, 369, 740, 1853])
    # other datasets at n = 100: f_bound(1), f(1; 0.5), f(1; 1)
    for n_items, bound1, half1, one1 in [(9916, 50, 79.1, 100.2), (25815, 130, 204.3, 259.1),
                                         (16980, 86, 134.7, 170.8), (20720, 105, 164.1, 208.2),
                                         (139331, 704, 1098.0, 1394.3)]:
        assert bound_mapping(n_items, 100)[0] == bound1
        assert beta_mapping(n_items, 100, 0.5)[0] == pytest.approx(half1, abs=0.05)
        assert beta_mapping(n_items, 100, 1.0)[0] == pytest.approx(one1, abs=0.05)


def test_discretised_beta_self_consistency() -> None:
    """Li et al. 2020, eqs. 14–17 table with the docs/concepts/sampled.md erratum: W_R ∝ max(θ_R,
    1/(N-1))^(a-1), a = 0.5, n = 100."""
    n_items, a = N_ML1M, 0.5
    theta = np.arange(n_items) / (n_items - 1)
    w = np.maximum(theta, 1 / (n_items - 1)) ** (a - 1)
    w /= w.sum()
    expected_shr = expected_sampled_curve(w, n_items, 100, "recall", 50)
    hr = np.concatenate([[0.0], np.cumsum(w)])
    f = beta_mapping(n_items, 100, a)
    ks = np.array([1, 2, 5, 10, 20, 50])
    np.testing.assert_allclose(expected_shr[ks - 1],
                               [0.0853, 0.1298, 0.2154, 0.3101, 0.4428, 0.7051], atol=5e-4)
    np.testing.assert_allclose(hr[np.floor(f[ks - 1] + 1e-9).astype(int)],
                               [0.0858, 0.1297, 0.2153, 0.3102, 0.4428, 0.7050], atol=5e-4)


def _recurrence_direct(n_items: int, sample_size: int, a: float) -> np.ndarray:
    """Eqs 16–17 of Li et al. 2020, eqs. 14–17 in linear space (moderate n only), as an independent
    oracle."""
    f = np.empty(sample_size)
    f[0] = (n_items - 1) * (a * np.exp(betaln(a, sample_size))) ** (1 / a) + 1
    for k in range(1, sample_size):
        inc = a * (n_items - 1) ** a * comb(sample_size - 1, k) * np.exp(
            betaln(a + k, sample_size - k))
        f[k] = (inc + (f[k - 1] - 1) ** a) ** (1 / a) + 1
    return f


def test_beta_properties() -> None:
    for n_items, sample_size in ((N_ML1M, 100), (500, 40), (25815, 100)):
        for a in (0.1, 0.3, 0.5, 1.0, 2.0):
            f = beta_mapping(n_items, sample_size, a)
            assert abs(f[-1] - n_items) <= 1e-9 * n_items  # Lemma 3.1: f(n; a) = N
            np.testing.assert_allclose(f, _recurrence_direct(n_items, sample_size, a),
                                       rtol=1e-9)
            assert np.all(np.diff(f) > 0)
        # a = 1: closed form k(N-1)/n + 1 equals the recurrence
        k = np.arange(1, sample_size + 1)
        log_space_near_one = beta_mapping(n_items, sample_size, 1.0 + 1e-12)
        np.testing.assert_allclose(beta_mapping(n_items, sample_size, 1.0),
                                   k * (n_items - 1) / sample_size + 1, rtol=0, atol=1e-9)
        np.testing.assert_allclose(log_space_near_one, k * (n_items - 1) / sample_size + 1,
                                   rtol=1e-9)
        # monotone in a (float noise at k = n allowed, Li et al. 2020, eqs. 14–17 property 4)
        grid = np.linspace(0.05, 1.5, 30)
        values = np.stack([beta_mapping(n_items, sample_size, a) for a in grid])
        assert np.all(np.diff(values[:, :-1], axis=0) > 0)
        assert np.all(np.diff(values[:, -1]) > -1e-9 * n_items)


def test_beta_one_at_n1000_equals_n100() -> None:
    """Li et al. 2020, §3 cross-check: f(10k; 1 | n = 1000) = f(k; 1 | n = 100)."""
    f100 = beta_mapping(N_ML1M, 100, 1.0)
    f1000 = beta_mapping(N_ML1M, 1000, 1.0)
    np.testing.assert_allclose(f1000[10 * np.arange(1, 101) - 1], f100, rtol=0, atol=1e-9)


def test_small_a_does_not_overflow() -> None:
    f = beta_mapping(139331, 3200, 0.02)
    assert np.all(np.isfinite(f)) and abs(f[-1] - 139331) < 1e-6
    assert np.all(np.diff(f) > 0)


def test_linear_and_bound_formulas() -> None:
    n_items, sample_size = 1000, 37
    k = np.arange(1, sample_size + 1)
    np.testing.assert_allclose(linear_mapping(n_items, sample_size),
                               (k - 1) / (sample_size - 1) * (n_items - 1) + 1, rtol=1e-15)
    assert linear_mapping(n_items, sample_size)[[0, -1]].tolist() == [1.0, 1000.0]
    raw = np.floor((k - 0.5) * (n_items - 1) / (sample_size - 1) + 0.5)
    np.testing.assert_array_equal(bound_mapping(n_items, sample_size), np.clip(raw, 1, n_items))
    assert bound_mapping(N_ML1M, 100)[-1] == N_ML1M  # 3724 clipped to N


def _synthetic_beta_ranks(a0: float, seed: int, n_users: int = 6040) -> np.ndarray:
    rng = np.random.default_rng(seed)
    global_ranks = 1 + np.floor(rng.beta(a0, 1.0, n_users) * (N_ML1M - 1)).astype(np.int64)
    return simulate_sampled_ranks(global_ranks, N_ML1M, 100, True, rng)


@pytest.mark.parametrize(("a0", "fitted"), [(0.3, 0.403), (0.5, 0.568), (1.0, 1.056)])
def test_beta_p_bias_and_convergence(a0: float, fitted: float) -> None:
    """Li et al. 2020, eq. 19: converges in <= 5 iterations; biased upward (0.3 -> 0.403, 0.5 ->
    0.568, 1 -> 1.056), each published value one draw with sd ≈ a/sqrt(M): compare the mean of 4
    seeds at ±0.02."""
    values = []
    for seed in range(4):
        sampled = _synthetic_beta_ranks(a0, seed)
        fit = fit_beta_p(sampled, N_ML1M, 100, a0=1.0, tol=1e-4)
        assert fit.converged and fit.n_iter <= 5
        values.append(fit.a)
        # the fixed point satisfies its own equation
        f = beta_mapping(N_ML1M, 100, fit.a)
        direct = -len(sampled) / np.log((f[sampled - 1] - 1) / (N_ML1M - 1)).sum()
        assert direct == pytest.approx(fit.a, abs=1e-3)
    assert abs(np.mean(values) - fitted) <= 0.02


def test_beta_p_and_dataset_mapping() -> None:
    sampled = [_synthetic_beta_ranks(0.4, seed, 3000) for seed in range(3)]
    fits = [fit_beta_p(r, N_ML1M, 100).a for r in sampled]
    f = mapping_function("beta_p", N_ML1M, 100, sampled_ranks=sampled[0])
    np.testing.assert_allclose(f, beta_mapping(N_ML1M, 100, fits[0]), rtol=1e-12)
    assert dataset_beta_parameter(sampled, N_ML1M, 100) == pytest.approx(np.median(fits))
    assert dataset_beta_parameter(sampled, N_ML1M, 100, "mean") == pytest.approx(np.mean(fits))
    g = mapping_function("dataset", N_ML1M, 100, reference_sampled_ranks=sampled, reduce="first")
    np.testing.assert_allclose(g, f, rtol=1e-12)


def _oracle_by_brute_force(global_ranks: np.ndarray, n_items: int, sample_size: int,
                           scheme: str = "binomial") -> list[int]:
    """f*(k) as the first K in 0..N with the least |HR@K − E[SHR@k]|, over every K."""
    w = np.bincount(global_ranks - 1, minlength=n_items) / len(global_ranks)
    expected_shr = expected_sampled_curve(w, n_items, sample_size, "recall", sample_size,
                                          scheme)
    hr = np.concatenate([[0.0], np.cumsum(w)])
    gaps = [np.abs(hr - expected_shr[k]) for k in range(sample_size)]
    return [int(np.flatnonzero(g <= g.min())[0]) for g in gaps]  # first argmin


def test_oracle_mapping_brute_force() -> None:
    rng = np.random.default_rng(3)
    n_items, sample_size = 400, 20
    global_ranks = 1 + np.floor(rng.beta(0.4, 1.0, 2000) * (n_items - 1)).astype(np.int64)
    f = oracle_mapping(global_ranks, n_items, sample_size)
    assert f.astype(int).tolist() == _oracle_by_brute_force(global_ranks, n_items, sample_size)
    np.testing.assert_array_equal(
        mapping_function("oracle", n_items, sample_size, global_ranks=global_ranks), f)


def test_aligned_curves_and_errors_brute_force() -> None:
    rng = np.random.default_rng(11)
    n_items, sample_size = 800, 50
    global_ranks = rng.integers(1, n_items + 1, size=300)
    sampled = simulate_sampled_ranks(global_ranks, n_items, sample_size, rng=rng)
    f = beta_mapping(n_items, sample_size, 0.5)
    out = aligned_curves(sampled, f, k_max=30, global_ranks=global_ranks)
    for k in range(1, 31):
        assert out.shr[k - 1] == pytest.approx(np.mean(sampled <= k), abs=1e-15)
        loc = int(np.floor(f[k - 1] + 1e-9))
        assert out.locations[k - 1] == loc
        assert out.hr_at_f[k - 1] == pytest.approx(np.mean(global_ranks <= loc), abs=1e-15)
    assert aligned_curves(sampled, f).shr.shape == (sample_size,)
    assert aligned_curves(sampled, f).hr_at_f is None

    errs = alignment_errors(out.shr, out.hr_at_f)
    diff = np.abs(out.hr_at_f - out.shr)
    assert errs["abs"] == pytest.approx(diff.mean())
    assert errs["abs@1"] == pytest.approx(diff[0])
    assert errs["abs@2-10"] == pytest.approx(diff[1:10].mean())
    rel = [d / s if s > 0 else 0.0 for d, s in zip(diff, out.shr, strict=True)]
    assert errs["rel"] == pytest.approx(np.mean(rel))
    assert errs["rel@2-10"] == pytest.approx(np.mean(rel[1:10]))


def test_half_integer_floor_rule() -> None:
    """f(10; 1) = 371.5 exactly for N = 3706, n = 100: HR reads location 371 (Li et al. 2020,
    §3)."""
    f = beta_mapping(N_ML1M, 100, 1.0)
    out = aligned_curves(np.array([1, 2]), f, global_ranks=np.array([371, 372]))
    assert out.locations[9] == 371
    assert out.hr_at_f[9] == 0.5
    # ref-README-KDD20: Linear f(2) = 38.42 and Beta@1 f(1) = 38.05 read the same HR (location 38)
    lin = aligned_curves(np.array([1]), linear_mapping(N_ML1M, 100)).locations
    assert lin[1] == out.locations[0] == 38
    # ⌊f + 1e-9⌋ absorbs float noise just below an integer
    nearly = np.array([2.9999999999, 5.0])
    assert aligned_curves(np.array([1]), nearly).locations.tolist() == [3, 5]


def test_bad_input() -> None:
    with pytest.raises(ConfigError, match="kind='cubic'"):
        mapping_function("cubic", 100, 10)
    with pytest.raises(ConfigError, match="needs the parameter a="):
        mapping_function("beta", 100, 10)
    with pytest.raises(ConfigError, match=r"does not take \['b'\]"):
        mapping_function("beta", 100, 10, a=1.0, b=2)
    with pytest.raises(ConfigError, match="a=-1"):
        beta_mapping(100, 10, -1.0)
    with pytest.raises(ConfigError, match=r"sample_size=100 is out of range; allowed: "
                                          r"an integer >= 2 and <= 99"):
        linear_mapping(100, 100)
    with pytest.raises(ConfigError, match=r"sampled_ranks\[1\]=11 .*\[1, 10\]"):
        fit_beta_p(np.array([1, 11]), 100, 10)
    with pytest.raises(DataError, match="diverges"):
        fit_beta_p(np.array([10, 10]), 100, 10)
    with pytest.raises(ConfigError, match="reduce='max'"):
        dataset_beta_parameter([np.array([1, 2])], 100, 10, reduce="max")
    with pytest.raises(ConfigError, match=r"sampled_ranks\[0\]=0"):
        aligned_curves(np.array([0]), np.ones(5))


def test_alignment_errors_by_hand() -> None:
    """Every key on curves where each K differs: a zero SHR@1 (rel 0 there, by the convention),
    then two K with known relative errors."""
    shr, hr = np.array([0.0, 0.25, 0.5]), np.array([0.1, 0.2, 0.75])
    # |HR - SHR| = 0.1, 0.05, 0.25; rel = 0 (SHR = 0), 0.2, 0.5
    expected = {"abs": 0.4 / 3, "rel": 0.7 / 3, "abs@1": 0.1, "rel@1": 0.0,
                "abs@2-10": 0.15, "rel@2-10": 0.35}
    errs = alignment_errors(shr, hr)
    assert errs.keys() == expected.keys()
    for key, value in expected.items():
        assert errs[key] == pytest.approx(value, abs=1e-15), key
    two = alignment_errors(np.array([0.5, 1.0]), np.array([0.25, 1.0]))  # the shortest curves
    assert two["rel@1"] == pytest.approx(0.5, abs=1e-15) and two["abs@2-10"] == 0.0
    for bad in ((np.array([0.5]), np.array([0.5])), (np.ones(3), np.ones(4)),
                (np.ones((2, 2)), np.ones((2, 2)))):
        with pytest.raises(ConfigError, match="must be equal 1-d curves of length >= 2"):
            alignment_errors(*bad)


def test_aligned_curves_edges_of_f_and_k_max() -> None:
    f = linear_mapping(100, 4)  # 1, 34, 67, 100
    out = aligned_curves(np.array([1, 1, 2]), f, k_max=2)
    np.testing.assert_array_equal(out.shr, [2 / 3, 1.0])
    assert out.locations.dtype.kind == "i" and out.locations.tolist() == [1, 34]
    # every sampled rank 1: SHR is 1 at every k up to k_max, not cut at the largest rank
    np.testing.assert_array_equal(aligned_curves(np.array([1, 1]), f).shr, [1.0] * 4)
    assert aligned_curves(np.array([1]), f, k_max=1).shr.tolist() == [1.0]
    assert aligned_curves(np.array([1]), np.array([1.0])).shr.tolist() == [1.0]  # n = 1
    for k_max in (0, 5):
        with pytest.raises(ConfigError, match=rf"k_max={k_max} is out of range; .*len\(f\) = 4"):
            aligned_curves(np.array([1]), f, k_max=k_max)
    for bad_f in (np.array([1.0, np.nan]), np.ones((2, 2)), np.array([])):
        with pytest.raises(ConfigError, match="f must be a finite 1-d array"):
            aligned_curves(np.array([1]), bad_f)


def test_aligned_curves_global_ranks_edges() -> None:
    f = linear_mapping(100, 4)
    single = aligned_curves(np.array([1]), f, global_ranks=np.array([34]))
    np.testing.assert_array_equal(single.hr_at_f, [0.0, 1.0, 1.0, 1.0])
    with pytest.raises(ConfigError, match="global_ranks is empty"):
        aligned_curves(np.array([1]), f, global_ranks=np.array([], dtype=np.int64))
    with pytest.raises(ConfigError, match=r"global_ranks\[0\]=0 is out of range"):
        aligned_curves(np.array([1]), f, global_ranks=np.array([0, 3]))


def test_bound_mapping_where_f1_is_one() -> None:
    """(N-1)/(n-1) = 2: f(k) = ⌊(k - 1/2)·2 + 1/2⌋ = 1, 3, 5, by hand (eqs. 10–13)."""
    np.testing.assert_array_equal(bound_mapping(5, 3), [1.0, 3.0, 5.0])


def test_dataset_parameter_refuses_no_models_and_passes_the_fit_settings() -> None:
    with pytest.raises(ConfigError, match="reference_sampled_ranks is empty"):
        dataset_beta_parameter([], 100, 10)
    ranks = np.array([1, 2, 2, 5, 9])
    one_step = fit_beta_p(ranks, 100, 10, max_iter=1).a
    assert one_step != fit_beta_p(ranks, 100, 10).a
    assert dataset_beta_parameter([ranks], 100, 10, max_iter=1) == one_step


@pytest.mark.parametrize("scheme", ["binomial", "hypergeometric"])
def test_oracle_mapping_of_each_scheme_and_of_a_perfect_model(scheme: str) -> None:
    rng = np.random.default_rng(5)
    n_items, sample_size = 60, 8
    global_ranks = rng.integers(1, 25, size=400)
    f = oracle_mapping(global_ranks, n_items, sample_size, scheme=scheme)
    assert f.astype(int).tolist() == _oracle_by_brute_force(global_ranks, n_items, sample_size,
                                                            scheme)
    # every target first: SHR = HR = 1 from K = 1 on, so f(k) = 1 (not 0) for every k
    perfect = oracle_mapping(np.ones(10, dtype=np.int64), n_items, sample_size, scheme=scheme)
    np.testing.assert_array_equal(perfect, np.ones(sample_size))


def _beta_p_direct(ranks: np.ndarray, n_items: int, sample_size: int, a0: float = 1.0,
                   max_iter: int = 20, tol: float = 1e-6) -> tuple[float, list[float], bool]:
    """Eq. 19 of Li et al. 2020 iterated on the direct recurrence: a ← −M / Σ_u
    ln((f(r_u; a) − 1)/(N − 1)) from a0, stopping when |Δa| < tol, at most max_iter steps."""
    history, a = [a0], a0
    for _ in range(max_iter):
        f = _recurrence_direct(n_items, sample_size, a)
        a_new = -len(ranks) / np.sum(np.log((f[ranks - 1] - 1) / (n_items - 1)))
        history.append(a_new)
        if abs(a_new - a) < tol:
            return a_new, history, True
        a = a_new
    return a, history, False


@pytest.mark.parametrize("ranks, n_items, sample_size, settings", [
    (np.array([1, 2, 2, 3, 7]), 500, 10, {}),  # converges
    (np.array([1, 2, 2, 3, 7]), 500, 10, {"a0": 0.5, "tol": 1e-3}),
    (np.array([2, 3, 3, 3]), 99, 3, {}),  # does not converge in 20 steps
    (np.array([2, 3, 3, 3]), 99, 3, {"max_iter": 2}),
])
def test_beta_p_is_the_fixed_point_iteration_written_out(ranks, n_items, sample_size,
                                                         settings) -> None:
    a, history, converged = _beta_p_direct(ranks, n_items, sample_size, **settings)
    fit = fit_beta_p(ranks, n_items, sample_size, **settings)
    assert fit.converged is converged and fit.n_iter == len(history) - 1
    np.testing.assert_allclose(fit.history, history, rtol=1e-9)
    assert fit.a == pytest.approx(a, rel=1e-9)
    # the same through mapping_function: the curve at the fitted a
    g = mapping_function("beta_p", n_items, sample_size, sampled_ranks=ranks, **settings)
    np.testing.assert_allclose(g, beta_mapping(n_items, sample_size, fit.a), rtol=1e-12)


def test_beta_p_stops_only_when_the_step_is_below_tol() -> None:
    ranks = np.array([1, 2, 2, 3, 7])
    steps = np.abs(np.diff(fit_beta_p(ranks, 500, 10, tol=1e-12).history))
    at_step_two = fit_beta_p(ranks, 500, 10, tol=float(steps[1]))  # |Δa| = tol: not yet
    assert at_step_two.n_iter == 3 and steps[2] < steps[1]


def test_beta_p_settings_and_inputs_are_checked() -> None:
    with pytest.raises(ConfigError, match="sampled_ranks is empty"):
        fit_beta_p(np.array([], dtype=np.int64), 100, 10)
    with pytest.raises(ConfigError, match=r"^max_iter=0 is out of range"):
        fit_beta_p(np.array([1, 2]), 100, 10, max_iter=0)
    assert fit_beta_p(np.array([1, 2]), 100, 10, max_iter=1).n_iter == 1
    with pytest.raises(ConfigError, match=r"^tol=0(\.0)? is out of range"):
        fit_beta_p(np.array([1, 2]), 100, 10, tol=0.0)
    with pytest.raises(ConfigError, match="a=-1.0 .*a is the Beta shape parameter"):
        beta_mapping(100, 10, -1.0)


def test_beta_mapping_with_a_large_shape_stays_finite() -> None:
    """a = 80 at n = 5 000: t_l spans e^680, so the partial sums are taken relative to their
    largest term; f(n; a) = N and f increases."""
    f = beta_mapping(100_000, 5_000, 80.0)
    assert np.all(np.isfinite(f)) and np.all(np.diff(f) >= 0)
    assert f[-1] == pytest.approx(100_000, rel=1e-12)


def test_mapping_function_passes_every_parameter_on() -> None:
    ranks = [np.array([1, 2, 2, 3, 7]), np.array([1, 1, 4, 9])]
    settings = {"a0": 0.5, "max_iter": 3, "tol": 1e-3}
    for kind, extra in (("beta_p", {"sampled_ranks": ranks[0]}),
                        ("dataset", {"reference_sampled_ranks": ranks})):
        a = [fit_beta_p(r, 500, 10, **settings).a for r in ranks[:1 if kind == "beta_p" else 2]]
        expected = beta_mapping(500, 10, float(np.median(a)))
        np.testing.assert_allclose(mapping_function(kind, 500, 10, **extra, **settings),
                                   expected, rtol=1e-12)
    median = float(np.median([fit_beta_p(r, 500, 10).a for r in ranks]))
    np.testing.assert_allclose(  # reduce defaults to the median
        mapping_function("dataset", 500, 10, reference_sampled_ranks=ranks),
        beta_mapping(500, 10, median), rtol=1e-12)
    global_ranks = np.arange(1, 40)  # the two schemes' oracles differ here (f(1) = 8 and 7)
    oracles = [mapping_function("oracle", 60, 8, global_ranks=global_ranks, scheme=scheme)
               for scheme in ("binomial", "hypergeometric")]
    np.testing.assert_array_equal(oracles[0], oracle_mapping(global_ranks, 60, 8, "binomial"))
    np.testing.assert_array_equal(oracles[1],
                                  oracle_mapping(global_ranks, 60, 8, "hypergeometric"))
    assert not np.array_equal(*oracles)
    for kind, needed in (("beta_p", "sampled_ranks"), ("dataset", "reference_sampled_ranks"),
                         ("oracle", "global_ranks")):
        with pytest.raises(ConfigError, match=rf"kind='{kind}' needs the parameter {needed}="):
            mapping_function(kind, 500, 10)


def test_the_oracle_mapping_breaks_an_exact_tie_towards_the_smaller_k() -> None:
    """Every target at global rank 3 of 5, one sampled item: its sampled rank is 1 with
    probability (R − 1)/(N − 1) = ½ exactly, so E[SHR@1] = ½ lies halfway between HR@K = 0
    (K ≤ 2) and HR@K = 1 (K ≥ 3); the argmin's first K is 0, the brute force's too."""
    global_ranks = np.full(4, 3)
    for scheme in ("binomial", "hypergeometric"):
        f = oracle_mapping(global_ranks, 5, 2, scheme=scheme)
        assert f.tolist() == [0.0, 3.0]
        assert f.astype(int).tolist() == _oracle_by_brute_force(global_ranks, 5, 2, scheme)

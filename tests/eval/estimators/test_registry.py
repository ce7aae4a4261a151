"""The estimator registry: `estimate` rejects bad parameters by name and, for every fixed-size
estimator, heterogeneous sample sizes; `estimate_repeats`, the batched EM over several samples,
equals one-sample estimates."""

from __future__ import annotations

import numpy as np
import pytest

from linrec.errors import ConfigError
from linrec.eval.estimators import estimate, estimate_repeats
from linrec.eval.simulate import simulate_adaptive_ranks, simulate_sampled_ranks
from tests.eval.estimators.conftest import draw


@pytest.mark.parametrize(
    "name,kwargs,match",
    [
        ("nope", {}, r"estimator='nope' is unknown; allowed: \['adaptive_mle', 'bv'"),
        ("bv", {"gamma": 0.0}, r"gamma=0.0 is out of range; allowed: a number > 0 and <= 1"),
        ("bv", {"gamma": 1.5}, r"gamma=1.5 is out of range; allowed: a number > 0 and <= 1"),
        ("bv", {"gama": 0.1}, r"no parameter\(s\) \['gama'\]"),
        ("mn", {"prior": np.ones(7)}, "prior must have length n_items=400"),
        ("bv", {"prior": "beta"}, "prior source 'beta'"),
        ("bv_mle", {"prior": "pooled"}, "prior_runs"),
        ("mes", {"fit_scale": "N"}, "fit_scale='N'"),
        ("mle", {"n_iter": -1}, "n_iter=-1"),
    ],
)
def test_bad_parameters_raise_config_error(name, kwargs, match):
    _, sampled = draw(400, 20, 300, seed=1)
    with pytest.raises(ConfigError, match=match):
        estimate(name, sampled, n_items=400, sample_size=20, **kwargs)


N_ITEMS = 800


@pytest.fixture(scope="module")
def global_ranks():
    rng = np.random.default_rng(3)
    return np.minimum(rng.zipf(1.4, 3000), N_ITEMS)


@pytest.mark.parametrize("scheme", ["binomial", "hypergeometric"])
def test_batched_mle_equals_one_sample_mle(global_ranks, scheme):
    rng = np.random.default_rng(0)
    samples = [(simulate_sampled_ranks(global_ranks, N_ITEMS, 50, replace=scheme == "binomial",
                                       rng=rng), 50) for _ in range(4)]
    batched = estimate_repeats("mle", samples, n_items=N_ITEMS, scheme=scheme)
    for (ranks, size), p_hat in zip(samples, batched, strict=True):
        single = estimate("mle", ranks, n_items=N_ITEMS, sample_size=size, scheme=scheme).p_hat
        np.testing.assert_allclose(p_hat, single, rtol=1e-10, atol=1e-15)
        assert p_hat.shape == (N_ITEMS,) and abs(p_hat.sum() - 1) < 1e-12


def test_batched_adaptive_mle_equals_one_sample_estimates(global_ranks):
    rng = np.random.default_rng(1)
    samples = []
    for _ in range(3):
        sample = simulate_adaptive_ranks(global_ranks, N_ITEMS, rng=rng, n0=20, n_max=160)
        samples.append((sample.sampled_ranks, sample.sample_sizes))
    batched = estimate_repeats("adaptive_mle", samples, n_items=N_ITEMS)
    for (ranks, sizes), p_hat in zip(samples, batched, strict=True):
        single = estimate("adaptive_mle", ranks, n_items=N_ITEMS, sample_size=sizes).p_hat
        np.testing.assert_allclose(p_hat, single, rtol=1e-10, atol=1e-15)


def test_other_estimators_fall_back_to_one_sample_calls(global_ranks):
    rng = np.random.default_rng(2)
    samples = [(simulate_sampled_ranks(global_ranks, N_ITEMS, 50, rng=rng), 50) for _ in range(2)]
    for p_hat, (ranks, size) in zip(estimate_repeats("bv", samples, n_items=N_ITEMS), samples,
                                    strict=True):
        np.testing.assert_array_equal(p_hat, estimate("bv", ranks, n_items=N_ITEMS,
                                                      sample_size=size).p_hat)


def test_bad_samples_are_rejected(global_ranks):
    ranks = simulate_sampled_ranks(global_ranks, N_ITEMS, 50, rng=np.random.default_rng(4))
    with pytest.raises(ConfigError, match="sample_size"):
        estimate_repeats("mle", [(ranks, 50), (ranks, 60)], n_items=N_ITEMS)
    with pytest.raises(ConfigError):
        estimate_repeats("mle", [(ranks + 60, 50)], n_items=N_ITEMS)


def test_the_estimators_are_split_by_the_samples_they_take():
    from linrec.eval.estimators.registry import adaptive_estimators, fixed_size_estimators

    assert adaptive_estimators() == ("adaptive_mle",)
    assert set(fixed_size_estimators()) == {
        "naive", "unbiased_rank", "ls", "cls", "bv", "mle", "weighted_mle", "mes", "mn",
        "bv_mle", "bv_mes", "mn_mle", "mn_mes"}


def test_repeats_take_the_scheme_and_a_single_sample(global_ranks):
    """Hypergeometric samples estimated per sample (bv) and batched (adaptive_mle) under that
    scheme, which differs from the binomial estimate; one sample alone is a batch of one."""
    rng = np.random.default_rng(5)
    ranks = simulate_sampled_ranks(global_ranks, N_ITEMS, 50, replace=False, rng=rng)
    for name in ("bv", "mle"):
        hyper = estimate_repeats(name, [(ranks, 50)], n_items=N_ITEMS, scheme="hypergeometric")
        single = estimate(name, ranks, n_items=N_ITEMS, sample_size=50,
                          scheme="hypergeometric").p_hat
        np.testing.assert_allclose(hyper[0], single, rtol=1e-10, atol=1e-15)
        binomial = estimate(name, ranks, n_items=N_ITEMS, sample_size=50).p_hat
        assert not np.allclose(hyper[0], binomial)
    sample = simulate_adaptive_ranks(global_ranks, N_ITEMS, rng=rng, n0=20, n_max=160,
                                     replace=False)
    pairs = [(sample.sampled_ranks, sample.sample_sizes)]
    hyper = estimate_repeats("adaptive_mle", pairs, n_items=N_ITEMS, scheme="hypergeometric")
    np.testing.assert_allclose(
        hyper[0], estimate("adaptive_mle", *pairs[0][:1], n_items=N_ITEMS,
                           sample_size=pairs[0][1], scheme="hypergeometric").p_hat,
        rtol=1e-10, atol=1e-15)
    with pytest.raises(ConfigError, match="estimator 'mle' needs one common sample_size"):
        estimate_repeats("mle", [(ranks, np.r_[np.full(25, 50), np.full(len(ranks) - 25, 60)])],
                         n_items=N_ITEMS)


# --------------------------------------------------------------------------- built at import
# The registry builds its entries when linrec is imported; built again here, at test time, the
# same factories must give the same estimators (and mutation testing reaches them).


def _same_result(a, b) -> None:
    import dataclasses

    for f in dataclasses.fields(a):
        np.testing.assert_equal(getattr(a, f.name), getattr(b, f.name), err_msg=f.name)


@pytest.mark.parametrize("base", ["bv", "mn"])
@pytest.mark.parametrize("source", ["uniform", "mle", "mes"])
def test_a_runner_built_now_is_the_registered_estimator(base, source):
    """BV and MN with each prior source: a runner built now has the registered one's signature
    and gives its result (estimate, prior, settings, solver) with its defaults and with other
    options; with a uniform prior, BV's estimate is the closed form with P(R) = 1/N written
    out; a gamma outside (0, 1] is refused."""
    import inspect

    from linrec.eval.estimators import bv, mn
    from linrec.eval.estimators._context import EstimatorInput
    from linrec.eval.estimators.registry import ESTIMATORS

    module = {"bv": bv, "mn": mn}[base]
    name = base if source == "uniform" else f"{base}_{source}"
    registered = ESTIMATORS.entry(name).runner
    built = module.runner(source)
    assert inspect.signature(built) == inspect.signature(registered)
    _, sampled = draw(120, 10, 400, seed=5)

    def run(runner, **options):
        return runner(EstimatorInput(name, sampled, 120, 10, "binomial"), **options)

    other = {"gamma": 0.3} if base == "bv" else {"variance_weight": "prior"}
    option_sets = [{}, other]
    if source != "uniform":  # the prior's own settings, and a prior pooled over other runs
        prior_params = {"n_iter": 7} if source == "mle" else {"entropy_weight": 0.05}
        runs = [draw(120, 10, 300, seed=s)[1] for s in (6, 7)]
        option_sets += [{"prior_params": prior_params},
                        {"prior": "pooled", "prior_runs": runs, "prior_params": prior_params}]
    for options in option_sets:
        _same_result(run(built, **options), run(registered, **options))
    if source != "uniform":  # the prior's settings reach it
        assert not np.array_equal(run(built, **option_sets[2]).p_hat, run(built).p_hat)
    if base == "bv":
        with pytest.raises(ConfigError, match="gamma"):
            run(built, gamma=1.5)
    if base == "bv" and source == "uniform":
        inputs = EstimatorInput(name, sampled, 120, 10, "binomial")
        p_hat, _ = bv.bv(inputs.cond, inputs.histogram, np.full(120, 1 / 120), 0.01)
        np.testing.assert_allclose(run(built).p_hat, p_hat, rtol=1e-12, atol=1e-15)


def test_a_spec_built_now_reads_its_parameters_from_its_runner():
    """An EstimatorSpec (a plugin's, or a prior variant) takes its parameters from its runner's
    keyword arguments after the inputs (one for a fixed sample size, five for per-target
    sizes) and refuses others by name; a prior variant is named <base>_<source>."""
    from linrec.eval.estimators import bv
    from linrec.eval.estimators.registry import ESTIMATORS, EstimatorSpec, _with_prior

    def fixed(run, *, alpha=1.0, beta="x"):
        return None

    def per_target(name, ranks, n_items, sizes, scheme, *, gamma=0.1):
        return None

    assert EstimatorSpec("custom", fixed).params == ("alpha", "beta")
    assert EstimatorSpec("custom", per_target, per_target_sizes=True).params == ("gamma",)
    with pytest.raises(ConfigError, match=r"estimator 'custom' has no parameter\(s\) "
                                          r"\['gamma'\]; allowed: \['alpha', 'beta'\]"):
        EstimatorSpec("custom", fixed).check_params({"gamma": 1, "alpha": 2})
    with pytest.raises(ConfigError, match="allowed: none"):
        EstimatorSpec("bare", lambda run: None).check_params({"x": 1})
    variant = _with_prior("bv", "mle", bv.runner("mle"))
    registered = ESTIMATORS.entry("bv_mle")
    assert (variant.name, variant.prior_from, variant.base, variant.params,
            variant.per_target_sizes) == ("bv_mle", "mle", "bv", registered.params, False)


def test_estimate_names_each_bad_argument_and_accepts_the_smallest_good_ones():
    """The scheme and the catalogue size are checked by name (N = 2 is the smallest catalogue);
    per-target sample sizes must be whole numbers >= 1 (1 allowed, 0 and 1.5 refused by name)
    and reach the estimator as integers; mixed sizes for a fixed-size estimator name it."""
    from linrec.eval.estimators._context import EstimatorInput

    _, sampled = draw(50, 10, 100, seed=2)
    with pytest.raises(ConfigError, match="scheme='bogus'"):
        estimate("mle", sampled, n_items=50, sample_size=10, scheme="bogus")
    for name in ("mle", "naive", "unbiased_rank"):
        with pytest.raises(ConfigError, match="n_items=1 "):
            estimate(name, np.ones(5, np.int64), n_items=1, sample_size=1)
    assert estimate("mle", np.ones(5, np.int64), n_items=2, sample_size=1).p_hat.shape == (2,)
    ranks = np.ones(4, np.int64)
    result = estimate("adaptive_mle", ranks, n_items=50, sample_size=np.array([1, 1, 2, 3]))
    assert result.sample_size.dtype == np.int64
    for sizes in (np.array([0, 1, 2, 3]), np.array([1.5, 2, 2, 2])):
        with pytest.raises(ConfigError, match="sample_size must hold integers >= 1"):
            estimate("adaptive_mle", ranks, n_items=50, sample_size=sizes)
    with pytest.raises(ConfigError, match="bv"):
        estimate("bv", ranks, n_items=50, sample_size=np.array([2, 2, 3, 3]))
    # an estimate's distribution is float64 whatever its runner returns
    run = EstimatorInput("x", ranks, 50, 3, "binomial")
    for p_hat in ([0.5] * 50, np.full(50, 0.02, np.float32)):
        assert run.result(p_hat).p_hat.dtype == np.float64

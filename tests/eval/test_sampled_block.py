"""The sampled block of a split (linrec.eval.sampled_block.SampledBlock, Li et al. 2020, §2.1,
Rendle 2019, eqs. 9–15, Li et al. 2023, Tables 1–11): exact target-level metrics and naive estimates
against brute force, the report layout, determinism, simulated settings, and the approximate
catalogue of pool="non_interacted"."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.data.splits import EvalSet
from linrec.eval.configs import AdaptiveConfig, SampledConfig
from linrec.eval.estimators import estimate
from linrec.eval.exact import evaluate_exact
from linrec.eval.metrics import curve
from linrec.eval.negatives import canonical_targets, draw_negatives
from linrec.eval.ranks import tie_break_keys
from linrec.eval.sampled_block import SampledBlock
from linrec.eval.simulate import repeat_rng, simulate_sampled_ranks
from tests.conftest import FixedScores

N_USERS, N_ITEMS, EVAL_SEED = 50, 40, 3
METRICS = ("recall", "ndcg", "ap")
GAINS = {"recall": lambda r: 1.0, "ndcg": lambda r: 1.0 / math.log2(r + 1), "ap": lambda r: 1.0 / r}


def _eval_set(seed: int) -> EvalSet:
    """Users with 1..4 targets and 2..8 fold-in items."""
    rng = np.random.default_rng(seed)
    foldin = np.zeros((N_USERS, N_ITEMS), dtype=np.float32)
    targets = np.zeros_like(foldin)
    for u in range(N_USERS):
        n_t, n_f = int(rng.integers(1, 5)), int(rng.integers(2, 9))
        picked = rng.choice(N_ITEMS, n_t + n_f, replace=False)
        targets[u, picked[:n_t]] = 1
        foldin[u, picked[n_t:]] = 1
    return EvalSet(np.arange(N_USERS), sp.csr_matrix(foldin), sp.csr_matrix(targets))


def _config(adaptive: tuple[str, ...] = ("adaptive_mle",), **overrides) -> SampledConfig:
    params = dict(sample_sizes=(8,), repeats=4, seed=9, estimators=("naive", "mle"),
                  metrics=METRICS, k_max=20,
                  adaptive=AdaptiveConfig(estimators=adaptive, n0=4, n_max=16))
    params.update(overrides)
    return SampledConfig(**params)


def _run(cfg: SampledConfig, evalset: EvalSet, model: FixedScores, batch_size: int = 7):
    """(the block, {setting: its JSON}) of one evaluator pass."""
    sampled = SampledBlock(cfg, evalset=evalset, n_items=N_ITEMS)
    result = evaluate_exact(model, evalset, ks=[5], metrics=["recall"], seed=EVAL_SEED,
                            users_known=True, batch_hooks=sampled.hooks(), batch_size=batch_size)
    settings = sampled.settings(result.rank_table)
    return sampled, {label: setting.to_json() for label, setting in settings.items()}


def _brute_force_order(evalset: EvalSet, scores: np.ndarray):
    """Per target (canonical order): its global rank R, its candidate count, and the exact order
    of the user's candidates (score descending, tie-break key ascending;
    docs/concepts/evaluation.md, ties)."""
    keys = tie_break_keys(EVAL_SEED, evalset.users, N_ITEMS)
    foldin, targets = evalset.foldin.toarray() > 0, evalset.targets.toarray() > 0
    rows, items = canonical_targets(evalset)
    global_ranks, n_candidates, positions = [], [], []
    for r, t in zip(rows.tolist(), items.tolist(), strict=True):
        candidates = [j for j in range(N_ITEMS)
                      if not foldin[r, j] and (j == t or not targets[r, j])]
        order = sorted(candidates, key=lambda j: (-scores[r, j], keys[r, j]))
        global_ranks.append(order.index(t) + 1)
        n_candidates.append(len(candidates))
        positions.append({j: p for p, j in enumerate(order)})
    return np.array(global_ranks), np.array(n_candidates), positions


def _target_metric(ranks: np.ndarray, metric: str, k: int) -> float:
    """T@K = mean over targets of 1[R <= K] w(R) (Rendle 2019, eqs. 9–15)."""
    return float(np.mean([GAINS[metric](r) if r <= k else 0.0 for r in ranks.tolist()]))


@pytest.fixture(scope="module")
def setup():
    evalset = _eval_set(0)
    scores = np.random.default_rng(1).integers(0, 6, size=(N_USERS, N_ITEMS)).astype(np.float32)
    return evalset, FixedScores(scores)


def test_exact_block_and_naive_estimates_match_brute_force(setup) -> None:
    evalset, model = setup
    cfg = _config()
    sampled, blocks = _run(cfg, evalset, model)
    block = blocks["n=8"]
    global_ranks, _, positions = _brute_force_order(evalset, model.scores)
    ks = [1, 5, 10, 20]
    for m in METRICS:
        for k in ks:
            assert block["exact"][f"{m}@{k}"] == pytest.approx(
                _target_metric(global_ranks, m, k), rel=1e-12, abs=1e-15)

    # the hook's sampled ranks: 1 + #{sampled candidates ranked above t in the exact order}
    rows, items = canonical_targets(evalset)
    sampled_ranks = sampled.hooks()[0].result()
    for repeat in range(cfg.repeats):
        negatives = draw_negatives(cfg.seed, repeat, rows, items, N_ITEMS, 8)
        want = [1 + sum(1 for j in negatives[i].tolist() if j in pos and pos[j] < pos[t])
                for i, (t, pos) in enumerate(zip(items.tolist(), positions, strict=True))]
        np.testing.assert_array_equal(sampled_ranks[repeat], want)

    # naive: the sampled rank read as the global rank (Rendle 2019, §4), mean/std over repeats
    naive = block["estimators"]["naive"]
    for m in METRICS:
        per_repeat_curves = np.array([[_target_metric(sampled_ranks[rep], m, k)
                                       for k in range(1, cfg.k_max + 1)]
                                      for rep in range(cfg.repeats)])
        exact_curve = np.array([_target_metric(global_ranks, m, k)
                                for k in range(1, cfg.k_max + 1)])
        for k in ks:
            entry = naive["metrics"][f"{m}@{k}"]
            values = per_repeat_curves[:, k - 1]
            assert entry["mean"] == pytest.approx(values.mean(), rel=1e-12, abs=1e-15)
            assert entry["std"] == pytest.approx(values.std(), rel=1e-9, abs=1e-15)
            exact = exact_curve[k - 1]
            assert entry["rel_error"] == pytest.approx((values.mean() - exact) / exact, rel=1e-9)
        # ARE in % over K = 1..k_max, a K with T@K = 0 contributing 0 (Li et al. 2023, Tables 1–11)
        are = [100 * np.mean([abs(c - e) / e if e else 0.0
                              for c, e in zip(curve_, exact_curve, strict=True)])
               for curve_ in per_repeat_curves]
        assert naive["are"][m]["mean"] == pytest.approx(np.mean(are), rel=1e-9)
        assert naive["are"][m]["std"] == pytest.approx(np.std(are), rel=1e-9, abs=1e-12)


def test_report_layout(setup) -> None:
    evalset, model = setup
    cfg = _config()
    _, blocks = _run(cfg, evalset, model)
    assert list(blocks) == ["n=8", "adaptive"]
    common = {"replace": True, "pool": "all_but_target", "repeats": 4, "seed": 9,
              "n_items": N_ITEMS, "n_items_approximate": False,
              "n_targets": int(evalset.targets.nnz), "k_max": 20, "metrics": list(METRICS)}
    assert blocks["n=8"]["protocol"] == {**common, "sample_size": 8, "method": "sample"}
    assert blocks["adaptive"]["protocol"] == {**common, "sample_size": "adaptive",
                                              "method": "simulate",
                                              "adaptive": {"n0": 4, "n_max": 16}}
    names = [f"{m}@{k}" for m in METRICS for k in (1, 5, 10, 20)]
    for block, estimators in ((blocks["n=8"], cfg.estimators),
                              (blocks["adaptive"], ("adaptive_mle",))):
        assert set(block) == {"protocol", "exact", "estimators", "curves", "rank_histogram",
                              "timings"}
        assert sorted(block["exact"]) == sorted(names)
        # the figures' data: mean curves K = 1..k_max, the exact one agreeing with `exact`
        assert set(block["curves"]) == {"exact", *estimators}
        for metric in METRICS:
            assert len(block["curves"]["exact"][metric]) == 20
            assert block["curves"]["exact"][metric][4] == block["exact"][f"{metric}@5"]
        hist = block["rank_histogram"]
        assert sum(hist["count"]) == int(evalset.targets.nnz) and min(hist["rank"]) >= 1
        assert list(block["estimators"]) == list(estimators)
        assert list(block["timings"]) == list(estimators)
    block = blocks["n=8"]
    for name, est in block["estimators"].items():
        assert set(est) == {"metrics", "are"}
        assert sorted(est["metrics"]) == sorted(names)
        for entry in est["metrics"].values():
            assert set(entry) == {"mean", "std", "rel_error"}
            assert math.isfinite(entry["mean"]) and entry["std"] >= 0
        assert set(est["are"]) == set(METRICS)
        for entry in est["are"].values():
            assert set(entry) == {"mean", "std"} and entry["mean"] >= 0
        assert block["timings"][name] >= 0


def test_report_is_deterministic(setup) -> None:
    """Two runs with the same seeds give the same numbers, whatever the batch size."""
    evalset, model = setup
    cfg = _config()
    _, first = _run(cfg, evalset, model, batch_size=7)
    _, second = _run(cfg, evalset, model, batch_size=N_USERS)
    for blocks in (first, second):
        for block in blocks.values():
            block.pop("timings")
    assert first == second
    _, other_seed = _run(_config(seed=10), evalset, model)
    assert other_seed["n=8"]["estimators"]["naive"] != first["n=8"]["estimators"]["naive"]
    assert (other_seed["adaptive"]["estimators"]["adaptive_mle"]
            != first["adaptive"]["estimators"]["adaptive_mle"])


def test_non_interacted_pool_flags_approximate_catalogue(setup) -> None:
    """pool="non_interacted": each target's pool has N_u = n_items - |fold-in| - |targets| + 1
    items; the estimators get one N = round(mean N_u), flagged approximate
    (docs/concepts/sampled.md)."""
    evalset, model = setup
    cfg = _config(pool="non_interacted", estimators=("naive", "mle"))
    sampled, blocks = _run(cfg, evalset, model)
    block = blocks["n=8"]
    global_ranks, n_candidates, positions = _brute_force_order(evalset, model.scores)
    protocol = block["protocol"]
    assert protocol["n_items_approximate"] is True
    assert protocol["n_items"] == round(float(np.mean(n_candidates)))
    assert protocol["pool"] == "non_interacted"
    # exact metrics from the global ranks clipped to that N
    clipped = np.minimum(global_ranks, protocol["n_items"])
    assert block["exact"]["ndcg@10"] == pytest.approx(_target_metric(clipped, "ndcg", 10),
                                                       rel=1e-12)
    # sampled items come from the user's non-interacted items only
    rows, items = canonical_targets(evalset)
    ranks = sampled.hooks()[0].result()
    excluded = (evalset.foldin + evalset.targets).toarray() > 0
    for repeat in range(cfg.repeats):
        negatives = draw_negatives(cfg.seed, repeat, rows, items, N_ITEMS, 8,
                                   pool="non_interacted", foldin=evalset.foldin,
                                   targets=evalset.targets)
        assert not np.any(excluded[rows[:, None], negatives])
        want = [1 + sum(1 for j in negatives[i].tolist() if pos[j] < pos[t])
                for i, (t, pos) in enumerate(zip(items.tolist(), positions, strict=True))]
        np.testing.assert_array_equal(ranks[repeat], want)
    _, default = _run(_config(estimators=("naive",)), evalset, model)
    assert default["n=8"]["protocol"]["n_items_approximate"] is False


def test_sampling_without_replacement_uses_the_hypergeometric_law(setup) -> None:
    """replace=False draws each sample set without replacement, so the estimators must assume
    the hypergeometric P(r|R) (Li et al. 2020), not the binomial one (regression: the block
    always used the binomial law)."""
    evalset, model = setup
    cfg = _config(replace=False, estimators=("mle", "bv"))
    sampled, blocks = _run(cfg, evalset, model)
    block = blocks["n=8"]
    ranks = sampled.hooks()[0].result()
    assert math.isfinite(
        blocks["adaptive"]["estimators"]["adaptive_mle"]["metrics"]["recall@5"]["mean"])
    for name in ("mle", "bv"):
        per_scheme = {}
        for scheme in ("hypergeometric", "binomial"):
            per_scheme[scheme] = np.mean([
                curve(estimate(name, ranks[rep], n_items=N_ITEMS, sample_size=8,
                               scheme=scheme).p_hat, "recall", 5)[4]
                for rep in range(cfg.repeats)])
        got = block["estimators"][name]["metrics"]["recall@5"]["mean"]
        assert got == pytest.approx(per_scheme["hypergeometric"], rel=1e-9)
        assert abs(per_scheme["binomial"] - per_scheme["hypergeometric"]) > 1e-3


def test_parallel_repeats_equal_sequential_estimates(setup) -> None:
    """Repeats run on a thread pool with shared cached P(r|R) operators and Gram matrices, and the
    per-run MLE/MES is shared as the prior of bv_/mn_ variants: every estimator's mean must equal
    a plain sequential `estimate` call per repeat (its own per-run prior included)."""
    evalset, model = setup
    names = ("bv_mle", "naive", "unbiased_rank", "ls", "bv", "mle", "weighted_mle", "mes", "mn",
             "mn_mle", "bv_mes", "mn_mes")
    cfg = _config(estimators=names, repeats=6, adaptive=())
    sampled, blocks = _run(cfg, evalset, model)
    block = blocks["n=8"]
    ranks = sampled.hooks()[0].result()
    for name in names:
        want = np.mean([curve(estimate(name, ranks[rep], n_items=N_ITEMS,
                                       sample_size=8).p_hat, "ndcg", 10)[9]
                        for rep in range(cfg.repeats)])
        got = block["estimators"][name]["metrics"]["ndcg@10"]["mean"]
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), name


def test_given_negatives_pool_is_hypergeometric_over_the_mean_pool(setup) -> None:
    """pool="given" (NCF): the dataset's negatives are distinct non-interacted items, so the
    estimators assume N = round(mean N_u) (flagged approximate) and the hypergeometric law."""
    evalset, model = setup
    rng = np.random.default_rng(5)
    excluded = (evalset.foldin + evalset.targets).toarray() > 0
    negatives = np.stack([rng.choice(np.flatnonzero(~row), 7, replace=False) for row in excluded])
    given = EvalSet(evalset.users, evalset.foldin, evalset.targets, negatives)
    cfg = _config(pool="given", repeats=1, estimators=("mle",))
    sampled, blocks = _run(cfg, given, model)
    block = blocks["n=8"]
    # the adaptive setting is simulated over the same approximate catalogue
    assert blocks["adaptive"]["protocol"]["n_items"] == block["protocol"]["n_items"]
    _, n_candidates, _ = _brute_force_order(given, model.scores)
    protocol = block["protocol"]
    assert protocol["n_items_approximate"] is True
    assert protocol["n_items"] == round(float(np.mean(n_candidates)))
    ranks = sampled.hooks()[0].result()[0]
    want = estimate("mle", ranks, n_items=protocol["n_items"], sample_size=8,
                    scheme="hypergeometric").p_hat
    assert block["estimators"]["mle"]["metrics"]["recall@5"]["mean"] == pytest.approx(
        curve(want, "recall", 5)[4], rel=1e-9)


def test_simulated_settings_draw_from_the_exact_law_with_the_run_streams(setup) -> None:
    """method="simulate": each repeat's sampled ranks are simulate_sampled_ranks of the global
    ranks with repeat_rng(seed, repeat, n), the streams the sampling study uses too; several
    sample sizes give one setting each."""
    evalset, model = setup
    cfg = _config(method="simulate", sample_sizes=(8, 16), estimators=("naive",), adaptive=())
    sampled, blocks = _run(cfg, evalset, model)
    assert sampled.hooks() == [] and list(blocks) == ["n=8", "n=16"]
    global_ranks, _, _ = _brute_force_order(evalset, model.scores)
    for n in (8, 16):
        curves = [curve(estimate("naive", simulate_sampled_ranks(
            global_ranks, N_ITEMS, n, rng=repeat_rng(cfg.seed, rep, n)), n_items=N_ITEMS,
            sample_size=n).p_hat, "ndcg", 10)[9] for rep in range(cfg.repeats)]
        got = blocks[f"n={n}"]["estimators"]["naive"]["metrics"]["ndcg@10"]["mean"]
        assert got == pytest.approx(np.mean(curves), rel=1e-12)
        assert blocks[f"n={n}"]["protocol"]["method"] == "simulate"


def test_per_repeat_estimators_run_on_one_blas_thread(setup, monkeypatch) -> None:
    """Repeats run in parallel threads, each estimator with single-threaded BLAS
    (linrec.hardware.blas_threads), so the threads do not oversubscribe the cores."""
    from threadpoolctl import threadpool_info, threadpool_limits

    import linrec.eval.sampled_block as block_module

    seen = []
    real = block_module.estimate_sharing_priors

    def recording(*args, **kwargs):
        seen.append([p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"])
        return real(*args, **kwargs)

    monkeypatch.setattr(block_module, "estimate_sharing_priors", recording)
    evalset, model = setup
    with threadpool_limits(limits=2, user_api="blas"):
        _run(_config(estimators=("naive", "bv"), repeats=2, adaptive=()), evalset, model)
    assert seen and all(threads and set(threads) == {1} for threads in seen), seen

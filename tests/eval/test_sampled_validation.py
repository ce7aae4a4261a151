"""eval.validation.method=sampled: the sampled ranks of every validation target, brute-forced
from the scores and the tie-break rule; the estimate they give; the evaluator's own sampled
ranks of a real model; what a run records."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.data.pipeline import prepare_data
from linrec.data.splits import Split
from linrec.errors import ConfigError
from linrec.eval import EvalConfig, validation_score
from linrec.eval.estimators.registry import estimate
from linrec.eval.exact import evaluate_exact
from linrec.eval.metrics import curve
from linrec.eval.negatives import canonical_targets, draw_negatives
from linrec.eval.sampled_ranks import SampledRankHook
from linrec.eval.sampled_validation import SampledValidation
from linrec.item_order import tie_break_keys_at
from linrec.models import EASE, MF
from tests.conftest import FixedScores, make_evalset, run_command


def _brute_force_ranks(scores: np.ndarray, evalset, n_items: int, sample_size: int,
                       seed: int, repeat: int = 0, positions=None) -> np.ndarray:
    """1 + #{sampled j beating the target}, one target at a time: j beats t when its score is
    higher, or equal with a smaller seeded key; the user's fold-in items and other targets
    never do. The sampled items are the sampled block's draw `repeat` (of the targets at
    canonical `positions`; None: all)."""
    rows, items = canonical_targets(evalset)
    negatives = draw_negatives(seed, repeat, rows, items, n_items, sample_size)
    if positions is not None:
        rows, items, negatives = rows[positions], items[positions], negatives[positions]
    excluded = (evalset.foldin + evalset.targets).toarray() > 0
    out = []
    for row, target, sampled in zip(rows, items, negatives, strict=True):
        user = evalset.users[row]
        s = scores[user]
        key = tie_break_keys_at(seed, np.full(n_items, user), np.arange(n_items))
        out.append(1 + sum(not excluded[row, j] and (s[j] > s[target] or (
            s[j] == s[target] and key[j] < key[target])) for j in sampled))
    return np.array(out)


def test_sampled_ranks_and_estimate_against_brute_force():
    """Integer scores tie often: the keys decide, as in the exact ranking."""
    n_users, n_items, n = 60, 40, 12
    evalset = make_evalset(n_users, n_items, seed=1, min_targets=1)
    scores = np.random.default_rng(2).integers(0, 4, (int(evalset.users.max()) + 1, n_items))
    validation = SampledValidation(evalset, n_items, key="ndcg@10", estimator="mle",
                                   sample_size=n, replace=True, seed=5, users_known=True,
                                   memory_budget_mb=0.001)  # a few targets per chunk
    assert validation.targets_per_call(0) < len(validation.rows)
    value = validation(FixedScores(scores.astype(np.float64)))
    want = _brute_force_ranks(scores, evalset, n_items, n, seed=5)
    np.testing.assert_array_equal(validation.ranks, want)
    p_hat = estimate("mle", want, n_items=n_items, sample_size=n, scheme="binomial").p_hat
    assert value == pytest.approx(curve(p_hat, "ndcg", 10)[9], rel=1e-12)
    assert validation.calls == 1 and validation.describe()["n_targets"] == len(want)


def test_adaptive_validation_ranks_a_target_ranked_first_again_among_twice_as_many():
    """estimator=adaptive_mle (Li et al. 2023, Algorithm 1): a target ranked first among its
    n items is ranked among a fresh set of 2n, up to n_max; each level is a draw of its own,
    the same at every pass. Against the brute force on each level's draw, and the estimate
    against adaptive_mle on those ranks and sizes."""
    n_items, n0, n_max, seed = 90, 10, 40, 5
    evalset = make_evalset(60, n_items, seed=3, min_targets=1)
    rng = np.random.default_rng(4)
    scores = rng.random((int(evalset.users.max()) + 1, n_items))
    targets = evalset.targets.tocoo()
    scores[evalset.users[targets.row], targets.col] += 0.6  # many targets first at n0
    validation = SampledValidation(evalset, n_items, key="recall@10", estimator="adaptive_mle",
                                   sample_size=n0, replace=True, seed=seed, users_known=True,
                                   n_max=n_max, memory_budget_mb=0.01)  # a few per call
    value = validation(FixedScores(scores))
    ranks = _brute_force_ranks(scores, evalset, n_items, n0, seed)
    sizes = np.full(len(ranks), n0)
    for level, size in enumerate((20, 40), start=1):
        grow = np.flatnonzero((ranks == 1) & (sizes == size // 2))
        ranks[grow] = _brute_force_ranks(scores, evalset, n_items, size, seed, level, grow)
        sizes[grow] = size
    assert set(sizes) == {10, 20, 40}
    np.testing.assert_array_equal(validation.ranks, ranks)
    np.testing.assert_array_equal(validation.sizes, sizes)
    p_hat = estimate("adaptive_mle", ranks, n_items=n_items, sample_size=sizes).p_hat
    assert value == pytest.approx(curve(p_hat, "recall", 10)[9], rel=1e-12)
    assert validation(FixedScores(scores)) == value  # the same sets at every pass
    described = validation.describe()
    assert described["n_max"] == 40 and described["mean_sample_size"] == pytest.approx(
        sizes.mean())
    with pytest.raises(ConfigError, match="n_max=300 must be eval.validation.sample_size=100 "
                                          "times a power of 2"):
        EvalConfig(validation={"method": "sampled", "estimator": "adaptive_mle",
                               "n_max": 300})


@pytest.fixture(scope="module")
def small_split():
    prepared = prepare_data({"source": {"name": "synthetic", "n_users": 400, "n_items": 150},
                             "cache": False})
    return prepared.split


@pytest.mark.parametrize("exclude_foldin", [True, False], ids=["fold-in excluded",
                                                              "fold-in ranked"])
@pytest.mark.parametrize("model", [EASE(lam=50.0), MF(epochs=2, sampling={"n_negatives": 8})],
                         ids=["ease", "mf"])
def test_a_models_sampled_ranks_are_the_evaluators(small_split: Split, model, exclude_foldin):
    """The ranks of the pairs a model scores alone (MF: its own dot products) equal the
    sampled ranks the evaluator's pass computes from full score rows at the same seed, with
    the fold-in items excluded or ranked."""
    model.fit(small_split.train)
    config = EvalConfig(selection="recall@20", exclude_foldin=exclude_foldin,
                        validation={"method": "sampled", "estimator": "mn_mle",
                                    "sample_size": 50})
    score = validation_score(small_split, config, seed=3)
    assert isinstance(score, SampledValidation)
    score(model)
    hook = SampledRankHook(small_split.valid, small_split.n_items, 50, seed=3,
                           exclude_foldin=exclude_foldin)
    evaluate_exact(model, small_split.valid, ks=[20], metrics=["recall"], seed=3,
                   users_known=True, batch_hooks=[hook], exclude_foldin=exclude_foldin)
    np.testing.assert_array_equal(score.ranks, hook.result()[0])
    exact = validation_score(small_split, EvalConfig(selection="recall@20",
                                                     exclude_foldin=exclude_foldin), seed=3)
    assert exact.fingerprint != score.fingerprint  # a checkpoint of one is not the other's
    other = validation_score(small_split, EvalConfig(selection="recall@20",
                                                     exclude_foldin=not exclude_foldin), seed=3)
    assert exact.fingerprint != other.fingerprint


def test_mf_scores_pairs_as_its_full_rows(small_split: Split, device: str):
    model = MF(epochs=1, sampling={"n_negatives": 8}, device=device).fit(small_split.train)
    users = np.array([3, 3, 7, 0])
    items = np.random.default_rng(0).integers(0, small_split.n_items, (4, 9))
    foldin = small_split.train[users]
    full = model.score(foldin, users)
    np.testing.assert_allclose(model.score_items(foldin, users, items),
                               np.take_along_axis(full, items, axis=1), rtol=1e-5, atol=1e-6)
    ease = EASE(lam=10.0).fit(small_split.train)  # the generic path: the rows themselves
    np.testing.assert_array_equal(ease.score_items(foldin, users, items),
                                  np.take_along_axis(ease.score(foldin, users), items, axis=1))
    with pytest.raises(ConfigError, match="item ids"):
        ease.score_items(foldin, users, items + small_split.n_items)


def test_sampled_validation_needs_a_curve_metric_and_a_sample_below_the_catalogue():
    with pytest.raises(ConfigError, match="eval.validation.method=sampled .* auc"):
        EvalConfig(selection="auc", validation={"method": "sampled"})
    evalset = make_evalset(20, 30, seed=0, min_targets=1)
    with pytest.raises(ConfigError, match="eval.validation.sample_size=30"):
        SampledValidation(evalset, 30, key="recall@5", estimator="mle", sample_size=30,
                          replace=True, seed=0, users_known=True)
    split = Split(train=sp.csr_matrix((20, 30), dtype=np.float32), valid=evalset, test=evalset)
    assert validation_score(split, EvalConfig(), on="valid").describe() == {
        "method": "exact", "metric": "ndcg@30"}


def test_a_run_records_what_validated_its_epochs(tmp_path):
    proc = run_command(tmp_path, "hydra.run.dir=run", "model=mf", "model.epochs=3",
                       "model.sampling.n_negatives=8", "data.source.n_users=300",
                       "data.source.n_items=100", "eval.sampled.enabled=false", "quiet=true",
                       "eval.selection=recall@10", "eval.validation.method=sampled",
                       "eval.validation.estimator=bv_mle", "eval.validation.sample_size=40")
    assert proc.returncode == 0, proc.stderr
    training = json.loads((tmp_path / "run" / "results.json").read_text())["training"]
    validation = training["validation"]
    assert validation["method"] == "sampled" and validation["estimator"] == "bv_mle"
    assert validation["metric"] == "target-level recall@10" and validation["sample_size"] == 40
    assert validation["passes"] == 3 and validation["seconds_per_pass"] > 0
    assert len({e["valid"] for e in training["epochs"]}) > 1

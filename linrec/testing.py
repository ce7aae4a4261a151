"""Contract checks for models, MF losses and estimators: the checks linrec's own test suite runs
over every built-in, public so that the author of a plugin tests theirs with the same ones, in
one line each (as scikit-learn's `check_estimator` and implicit's test mixin do):

    from linrec.testing import check_estimator, check_loss, check_recommender

    def test_my_model(tmp_path):
        check_recommender("cooccurrence", tmp_path=tmp_path)

Each check raises AssertionError (with what failed) or linrec's own error; it returns nothing.
The checks are contracts, not accuracy tests: a model that ranks at random passes them, so a
plugin's own tests still compare its numbers with an independent computation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

#: the cut-off the recommender contract lists
CONTRACT_K = 5


def contract_split():
    """The small synthetic split the recommender contract fits (120 users x 60 items)."""
    from linrec.data.pipeline import prepare_data

    return prepare_data({"source": {"name": "synthetic", "n_users": 120, "n_items": 60,
                                    "mean_user_interactions": 8.0},
                         "cache": False}).split


def contract_params(name: str) -> dict[str, Any]:
    """A registered model's defaults with the fewest epochs or iterations that still train
    something (epochs=1, no resuming from a checkpoint, SLIM's max_iter=20)."""
    from linrec.models import MODEL_CONFIGS

    names = MODEL_CONFIGS.entry(name).names()
    params: dict[str, Any] = {"epochs": 1} if "epochs" in names else {}
    if "resume" in names:  # a second fit trains again instead of reading the first's checkpoint
        params["resume"] = False
    if name == "slim":
        params["max_iter"] = 20
    return params


def check_recommender(name: str, params: Mapping[str, Any] | None = None, *, split=None,
                      tmp_path: str | Path | None = None) -> None:
    """The Recommender contract of the registered model `name` (with `params`, default
    `contract_params(name)`), on `split` (default `contract_split()`):

    * `fit` returns the model; fitted attributes end in `_` (or are private);
    * scores are (users x items), finite and rank each row's items (not constant);
    * `recommend` lists the best items of the masked scores, best first, never a fold-in item;
    * the same config gives the same numbers; a model that learns from the interaction
      pattern (`binary_input`) is blind to the stored values;
    * a saved model (under `tmp_path`, when given) loads with the same scores;
    * bad input is the same error for every model (`check_bad_input`).
    """
    from linrec.models import build_model

    params = contract_params(name) if params is None else dict(params)
    split = contract_split() if split is None else split
    model = build_model(name, **params)
    before = set(vars(model))
    assert model.fit(split.train) is model, f"{name}: fit must return the model"
    fitted = sorted(set(vars(model)) - before)
    assert fitted and all(a.endswith("_") or a.startswith("_") for a in fitted), \
        f"{name}: fitted attributes must end in '_' (or be private): {fitted}"

    test = split.test
    n_items = split.train.shape[1]
    scores = model.score(test.foldin, test.users)
    assert scores.shape == (test.n_users, n_items), \
        f"{name}: scores {scores.shape}, expected {(test.n_users, n_items)}"
    assert np.isfinite(scores).all(), f"{name}: non-finite scores"
    assert (np.ptp(scores, axis=1) > 0).mean() > 0.9, f"{name}: constant score rows"

    items, top = model.recommend(test.foldin, CONTRACT_K, test.users)
    assert items.shape == top.shape == (test.n_users, CONTRACT_K) and (items >= 0).all(), \
        f"{name}: recommend gave shapes {items.shape}, {top.shape}"
    masked = np.where(test.foldin.toarray() > 0, -np.inf, scores.astype(np.float64))
    rows = np.arange(test.n_users)[:, None]
    np.testing.assert_array_equal(top, scores[rows, items],
                                  err_msg=f"{name}: recommend's scores are not the items' scores")
    assert np.isfinite(masked[rows, items]).all(), f"{name}: a fold-in item was recommended"
    assert (np.diff(top, axis=1) <= 0).all(), f"{name}: recommend's lists are not best first"
    rest = masked.copy()
    rest[rows, items] = -np.inf
    assert (rest.max(axis=1) <= top[:, -1]).all(), f"{name}: a better item was left out"

    again = build_model(name, **params).fit(split.train)
    np.testing.assert_array_equal(again.score(test.foldin, test.users), scores,
                                  err_msg=f"{name}: the same config gave other scores")

    if model.binary_input:  # implicit feedback: a stored 3 is an interaction like a 1
        weighted = split.train.copy()
        weighted.data = weighted.data * 3.0
        again = build_model(name, **params).fit(weighted)
        np.testing.assert_array_equal(again.score(test.foldin, test.users), scores,
                                      err_msg=f"{name}: binary_input, yet the values matter")

    if tmp_path is not None:
        path = Path(tmp_path) / f"{name}.pkl"
        model.save(path)
        loaded = type(model).load(path)
        np.testing.assert_array_equal(loaded.score(test.foldin, test.users), scores,
                                      err_msg=f"{name}: the loaded model scores differently")
    check_bad_input(name, params, split=split)


def check_bad_input(name: str, params: Mapping[str, Any] | None = None, *, split=None) -> None:
    """The same bad input is the same DataError for every model: an empty training matrix, and
    fold-in rows with fewer or more items than the model was fitted on."""
    from linrec.errors import DataError
    from linrec.models import build_model

    params = contract_params(name) if params is None else dict(params)
    split = contract_split() if split is None else split
    n_users, n_items = split.train.shape
    _raises(DataError, "no interactions",
            lambda: build_model(name, **params).fit(sp.csr_matrix((n_users, n_items))), name)
    model = build_model(name, **params).fit(split.train)
    fitted = f"items, the model was fitted on {n_items}"
    _raises(DataError, fitted,
            lambda: model.score(sp.csr_matrix((3, n_items - 1)), np.arange(3)), name)
    _raises(DataError, fitted,
            lambda: model.recommend(sp.csr_matrix((3, n_items + 1)), CONTRACT_K, np.arange(3)),
            name)


def _raises(error: type[Exception], text: str, call, name: str) -> None:
    try:
        call()
    except error as exc:
        assert text in str(exc), f"{name}: {type(exc).__name__} {exc!r} does not say {text!r}"
        return
    raise AssertionError(f"{name}: no {error.__name__} ({text!r})")


def check_loss(name: str, params: Mapping[str, Any] | None = None, *,
               train_mf: bool = True) -> None:
    """The MF-loss contract of the registered loss `name` (with `params`):

    * on a batch of B rows it returns (B,) values;
    * at temperature 0.02 (cosine scores up to 50) and with dot-product logits of 1e4, its values
      and gradients are finite (log-sum-exp, no overflow);
    * with `train_mf`, the MF trainer trains with it for one epoch on a small split, every
      epoch's loss finite (what the trainer hands the loss follows its flags).
    """
    import torch

    from linrec.models.losses import LOSS_CONFIGS

    config = LOSS_CONFIGS.entry(name).from_mapping({"name": name, **dict(params or {})})
    rows, negatives, positives = 6, 9, 4
    for scale in (1.0 / 0.02, 1e4):
        generator = torch.Generator().manual_seed(0)

        def uniform(*shape, g=generator, scale=scale):
            return ((torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1) * scale
                    ).to(torch.float32).requires_grad_(True)

        s_pos, s_neg, s_ppos = uniform(rows), uniform(rows, negatives), uniform(rows, positives)
        tau = torch.rand(rows, generator=generator, dtype=torch.float64).to(torch.float32) * 0.05
        logq = torch.full((rows, negatives), -math.log(1e5))
        values = config(s_pos, s_neg, s_ppos, tau, logq, -scale)
        assert tuple(values.shape) == (rows,), \
            f"loss {name}: values of shape {tuple(values.shape)}, expected ({rows},)"
        total = values.sum()
        total.backward()
        assert torch.isfinite(total), f"loss {name}: non-finite value at logits of {scale:g}"
        for x in (s_pos, s_neg, s_ppos):
            assert x.grad is None or torch.isfinite(x.grad).all(), \
                f"loss {name}: non-finite gradient at logits of {scale:g}"
    if train_mf:
        from linrec.data.pipeline import prepare_data
        from linrec.models import build_model

        split = prepare_data({"source": {"name": "synthetic", "n_users": 200, "n_items": 80},
                              "cache": False}).split
        model = build_model("mf", loss={"name": name, **dict(params or {})}, epochs=1,
                            resume=False, checkpoint_dir=None, dim=8, batch_size=256,
                            sampling={"n_negatives": 16, "n_positives": 4})
        model.fit(split.train)
        losses = [record["loss"] for record in model.history_]
        assert losses and all(math.isfinite(v) for v in losses), \
            f"loss {name}: MF trained with non-finite losses {losses}"


def check_estimator(name: str, params: Mapping[str, Any] | None = None) -> None:
    """The estimator contract of the registered estimator `name` (with `params`), on sampled
    ranks drawn here from their binomial law given power-law global ranks:

    * `estimate` returns P̂(R) as a finite float64 vector of length n_items, and its metric
      curves (recall, ndcg, ap at K = 1..50) are finite;
    * the same sample gives the same estimate;
    * a fixed-size estimator refuses samples of different sizes (ConfigError);
    * an estimator whose P̂ is a distribution (non-negative entries) sums to 1.
    """
    from linrec.errors import ConfigError
    from linrec.eval.estimators import ESTIMATORS, estimate

    spec = ESTIMATORS.entry(name)
    params = dict(params or {})
    n_items, sample_size, n_targets = 300, 20, 400
    rng = np.random.default_rng(0)
    weights = np.arange(1, n_items + 1, dtype=np.float64) ** -0.9
    global_ranks = rng.choice(n_items, size=n_targets, p=weights / weights.sum()) + 1
    theta = (global_ranks - 1) / (n_items - 1)
    if spec.per_target_sizes:
        sizes = np.where(rng.random(n_targets) < 0.5, sample_size, 2 * sample_size)
        ranks = rng.binomial(sizes - 1, theta) + 1
        size: Any = sizes
    else:
        ranks = rng.binomial(sample_size - 1, theta) + 1
        size = sample_size
    result = estimate(name, ranks, n_items=n_items, sample_size=size, **params)
    p_hat = np.asarray(result.p_hat)
    assert p_hat.shape == (n_items,) and p_hat.dtype == np.float64, \
        f"estimator {name}: p_hat {p_hat.shape} {p_hat.dtype}, expected ({n_items},) float64"
    assert np.isfinite(p_hat).all(), f"estimator {name}: non-finite p_hat"
    for metric in ("recall", "ndcg", "ap"):
        assert np.isfinite(result.curve(metric, 50)).all(), \
            f"estimator {name}: non-finite {metric} curve"
    if (p_hat >= 0).all():
        assert abs(p_hat.sum() - 1.0) < 1e-9, \
            f"estimator {name}: a non-negative p_hat must sum to 1, sums to {p_hat.sum()!r}"
    again = estimate(name, ranks, n_items=n_items, sample_size=size, **params)
    np.testing.assert_array_equal(again.p_hat, p_hat,
                                  err_msg=f"estimator {name}: the same sample, another estimate")
    if not spec.per_target_sizes:
        try:
            estimate(name, np.array([1, 2, 3, 4]), n_items=n_items,
                     sample_size=np.array([20, 20, 40, 40]), **params)
        except ConfigError as exc:
            assert "one common sample_size" in str(exc), f"estimator {name}: {exc}"
        else:
            raise AssertionError(f"estimator {name}: samples of different sizes were accepted")

"""The Recommender contract (linrec.models.base): the matrix checks every model shares, the
fit/score templates, the weights accessor, save/load."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.errors import ConfigError, DataError
from linrec.models import EASE, WMF, ItemKNN, MostPopular, PureSVD
from linrec.models.base import binary_pattern, check_foldin, check_train


def _train() -> sp.csr_matrix:
    rng = np.random.default_rng(0)
    return sp.csr_matrix((rng.random((40, 12)) < 0.3).astype(np.float32))


def test_check_train_and_foldin():
    train = _train()
    assert check_train(train, "m.fit") is not None
    for bad, match in [(train.toarray(), "scipy.sparse"), (sp.csr_matrix((3, 0)), "0 items")]:
        with pytest.raises(DataError, match=match):
            check_train(bad, "m.fit")
    nan = train.copy()
    nan.data[0] = np.nan
    with pytest.raises(DataError, match="m.fit: train contains NaN"):
        check_train(nan, "m.fit")
    with pytest.raises(DataError, match="m.score: foldin has 5 items, the model was fitted on 12"):
        check_foldin(sp.csr_matrix((2, 5)), 12, "m.score")


def test_binary_pattern_is_a_copy_of_ones():
    matrix = sp.csr_matrix(np.array([[2.0, 0.0, 3.0]]))
    matrix.data[0] = 0.0  # an explicit zero is not an interaction
    pattern = binary_pattern(matrix, "m.fit")
    assert pattern.nnz == 1 and pattern.data.tolist() == [1.0] and pattern.dtype == np.float64
    assert matrix.data.tolist() == [0.0, 3.0]


@pytest.mark.parametrize("model", [EASE(lam=1.0), PureSVD(rank=3), ItemKNN(k=3),
                                   WMF(factors=2, iterations=1)])
def test_every_model_checks_its_matrices_and_fitted_state(model):
    name = model.name
    with pytest.raises(ConfigError, match=f"{name} is not fitted"):
        model.score(sp.csr_matrix((1, 12)))
    with pytest.raises(DataError, match=f"{name}.fit: train must be"):
        model.fit(np.ones((3, 12)))
    model.fit(_train())
    assert model.is_fitted and model.n_items_ == 12
    with pytest.raises(DataError, match=f"{name}.score: foldin has 13 items"):
        model.score(sp.csr_matrix((1, 13)))


def test_weights_accessor():
    train = _train()
    ease = EASE(lam=1.0, dtype="float64").fit(train)
    np.testing.assert_allclose(ease.weights(), ease.W_)
    np.testing.assert_allclose(train @ ease.weights(), ease.score(train))
    knn = ItemKNN(k=3).fit(train)
    np.testing.assert_allclose((train @ knn.weights()).toarray(), knn.score(train), rtol=1e-6)
    with pytest.raises(NotImplementedError, match="wmf has no item-item matrix"):
        WMF(factors=2, iterations=1).fit(train).weights()


def test_save_and_load_keep_the_config_and_the_fit(tmp_path):
    train = _train()
    model = EASE(lam=2.0).fit(train)
    model.save(tmp_path / "model.pkl")
    loaded = EASE.load(tmp_path / "model.pkl")
    assert loaded.config == model.config and loaded.lam == 2.0
    np.testing.assert_array_equal(loaded.score(train), model.score(train))


# --------------------------------------------------------------------------- recommend


@pytest.mark.parametrize("model", [MostPopular(), EASE(lam=3.0, dtype="float64")])
def test_recommend_lists_items_in_the_evaluators_order(model):
    """Position of each held-out item t in the full list (fold-in excluded) equals its global
    rank R plus the user's other held-out items that beat it (the evaluator excludes those)."""
    from linrec.eval.ranks import global_ranks, tie_break_keys_at
    from tests.conftest import make_evalset

    evalset = make_evalset(30, 25, seed=3, min_targets=2)
    model.fit(_train_of(25))
    items, scores = model.recommend(evalset.foldin, 25, evalset.users, seed=7)
    table = global_ranks(model, evalset, seed=7, users_known=True)
    targets = evalset.targets.toarray() > 0
    for row, item, rank in zip(table.rows, table.items, table.ranks, strict=True):
        full = model.score(evalset.foldin[row], evalset.users[[row]])[0]
        keys = tie_break_keys_at(7, np.full(25, evalset.users[row]), np.arange(25))
        others = np.flatnonzero(targets[row])
        beaten_by = sum(1 for o in others if (full[o], -int(keys[o])) > (full[item],
                                                                         -int(keys[item])))
        assert list(items[row]).index(item) + 1 == rank + beaten_by
    foldin = evalset.foldin.toarray() > 0
    for row in range(30):  # fold-in items never listed; the list ends in padding
        listed = items[row][items[row] >= 0]
        assert not foldin[row, listed].any() and len(listed) == 25 - foldin[row].sum()
        assert np.all(scores[row][items[row] < 0] == -np.inf)
        assert np.all(np.diff(scores[row][items[row] >= 0]) <= 0)


def _train_of(n_items: int) -> sp.csr_matrix:
    rng = np.random.default_rng(1)
    return sp.csr_matrix((rng.random((60, n_items)) < 0.25).astype(np.float32))


def test_recommend_batches_excludes_and_maps_raw_ids():
    train = _train_of(20)
    model = EASE(lam=2.0).fit(train)
    foldin = train[:15]
    items, scores = model.recommend(foldin, 5)
    small = model.recommend(foldin, 5, memory_budget_mb=20 * 16 * 3 / 2**20)  # 3 rows a batch
    np.testing.assert_array_equal(small[0], items)
    np.testing.assert_array_equal(small[1], scores)
    # the naive list: mask, sort (continuous scores, no ties)
    full = model.score(foldin)
    full[foldin.toarray() > 0] = -np.inf
    np.testing.assert_array_equal(items, np.argsort(-full, axis=1, kind="stable")[:, :5])
    # exclude=False lists fold-in items too; an explicit matrix excludes its entries instead
    anything = model.recommend(foldin, 5, exclude=False)[0]
    np.testing.assert_array_equal(anything, np.argsort(-model.score(foldin), axis=1)[:, :5])
    only_first = sp.csr_matrix(([1.0] * 15, ([*range(15)], [0] * 15)), shape=(15, 20))
    listed = model.recommend(foldin, 20, exclude=only_first)[0]
    assert (listed[:, :19] != 0).all() and (listed[:, 19] == -1).all()
    raw = np.array([f"item{j}" for j in range(20)])
    named, _ = model.recommend(foldin, 5, item_ids=raw)
    assert named.dtype == object and named[0, 0] == f"item{items[0, 0]}"
    assert model.recommend(foldin, 50)[0].shape == (15, 20)  # k above the catalogue


def test_recommend_in_small_batches_selects_as_a_large_request(monkeypatch):
    """A request of many rows in small batches takes the compiled selection for every batch
    (its size decides, not the batch's), and lists what one batch lists."""
    import linrec.item_order as item_order
    from linrec.hardware import batch_size_for

    train = sp.csr_matrix((np.random.default_rng(2).random((300, 40)) < 0.2).astype(np.float32))
    model = MostPopular().fit(train)
    whole = model.recommend(train, 5)
    seen = []
    original = item_order.top_k
    monkeypatch.setattr(item_order, "top_k",
                        lambda *a, **kw: seen.append(kw.get("compiled")) or original(*a, **kw))
    budget = 40 * 16 * 10 / 2**20
    assert batch_size_for(40, budget) == 10
    small = model.recommend(train, 5, memory_budget_mb=budget)
    assert seen == [True] * 30
    np.testing.assert_array_equal(small[0], whole[0])
    np.testing.assert_array_equal(small[1], whole[1])
    model.recommend(train[:20], 5, memory_budget_mb=budget)
    assert seen[-2:] == [False, False]  # 20 rows: numpy's selection, no kernel to load


def test_recommend_rejects_bad_input():
    model = EASE(lam=2.0).fit(_train_of(20))
    foldin = _train_of(20)[:4]
    with pytest.raises(ConfigError, match="ease.recommend: k=0 must be a positive integer"):
        model.recommend(foldin, 0)
    with pytest.raises(DataError, match="ease.recommend: foldin has 5 items"):
        model.recommend(sp.csr_matrix((2, 5)), 3)
    with pytest.raises(DataError, match=r"users has shape \(3,\); expected \(4,\)"):
        model.recommend(foldin, 3, users=np.arange(3))
    with pytest.raises(DataError, match="item_ids has 3 entries"):
        model.recommend(foldin, 3, item_ids=np.arange(3))
    with pytest.raises(DataError, match="exclude has 2 rows"):
        model.recommend(foldin, 3, exclude=sp.csr_matrix((2, 20)))
    with pytest.raises(ConfigError, match="not fitted"):
        EASE().recommend(foldin, 3)

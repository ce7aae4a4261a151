"""The Recommender contract, run against every registered model (as implicit's
RecommenderBaseTestMixin does for its models): default settings fit a small catalogue; scores
have the right shape, are finite and rank each row's items (not constant); `recommend` lists
the best items of the masked scores, best first, never a fold-in item; the same config gives
the same numbers; a model that learns from the interaction pattern (`binary_input`) is blind
to the stored values; a saved model loads with the same scores; the same bad input is the same
error type for every model; and fitted attributes follow one naming rule."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.data.pipeline import prepare_data
from linrec.errors import DataError
from linrec.models import MODEL_CONFIGS, build_model

K = 5


@pytest.fixture(scope="module")
def split():
    return prepare_data({"source": {"name": "synthetic", "n_users": 120, "n_items": 60,
                                    "mean_user_interactions": 8.0},
                         "cache": False}).split


def _params(name: str) -> dict:
    """The defaults, with the fewest epochs or iterations that still train something."""
    names = MODEL_CONFIGS[name].names()
    params = {"epochs": 1} if "epochs" in names else {}
    if "resume" in names:  # a second fit trains again instead of reading the first's checkpoint
        params["resume"] = False
    if name == "slim":
        params["max_iter"] = 20
    return params


@pytest.mark.parametrize("name", sorted(MODEL_CONFIGS))
def test_the_recommender_contract(name, split, tmp_path):
    model = build_model(name, **_params(name))
    before = set(vars(model))
    assert model.fit(split.train) is model
    fitted = sorted(set(vars(model)) - before)
    assert fitted and all(a.endswith("_") or a.startswith("_") for a in fitted), \
        f"{name}: fitted attributes must end in '_' (or be private): {fitted}"

    test = split.test
    n_items = split.train.shape[1]
    scores = model.score(test.foldin, test.users)
    assert scores.shape == (test.n_users, n_items) and np.isfinite(scores).all()
    assert (np.ptp(scores, axis=1) > 0).mean() > 0.9, f"{name}: constant score rows"

    items, top = model.recommend(test.foldin, K, test.users)
    assert items.shape == top.shape == (test.n_users, K) and (items >= 0).all()
    masked = np.where(test.foldin.toarray() > 0, -np.inf, scores.astype(np.float64))
    rows = np.arange(test.n_users)[:, None]
    np.testing.assert_array_equal(top, scores[rows, items])  # the scores of the listed items
    assert np.isfinite(masked[rows, items]).all(), f"{name}: a fold-in item was recommended"
    assert (np.diff(top, axis=1) <= 0).all(), f"{name}: not best first"
    rest = masked.copy()
    rest[rows, items] = -np.inf
    assert (rest.max(axis=1) <= top[:, -1]).all(), f"{name}: a better item was left out"

    again = build_model(name, **_params(name)).fit(split.train)
    np.testing.assert_array_equal(again.score(test.foldin, test.users), scores)

    if model.binary_input:  # implicit feedback: a stored 3 is an interaction like a 1
        weighted = split.train.copy()
        weighted.data = weighted.data * 3.0
        again = build_model(name, **_params(name)).fit(weighted)
        np.testing.assert_array_equal(again.score(test.foldin, test.users), scores)

    model.save(tmp_path / "model.pkl")
    loaded = type(model).load(tmp_path / "model.pkl")
    np.testing.assert_array_equal(loaded.score(test.foldin, test.users), scores)


@pytest.mark.parametrize("name", sorted(MODEL_CONFIGS))
def test_the_same_bad_input_is_the_same_error_for_every_model(name, split):
    with pytest.raises(DataError, match="no interactions"):
        build_model(name, **_params(name)).fit(sp.csr_matrix((40, 60)))
    model = build_model(name, **_params(name)).fit(split.train)
    with pytest.raises(DataError, match="items, the model was fitted on 60"):
        model.score(sp.csr_matrix((3, 59)), np.arange(3))
    with pytest.raises(DataError, match="items, the model was fitted on 60"):
        model.recommend(sp.csr_matrix((3, 61)), K, np.arange(3))

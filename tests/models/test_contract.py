"""The Recommender contract (`linrec.testing.check_recommender`, public so that a plugin's
author runs the same checks), run against every registered model as implicit's
RecommenderBaseTestMixin does for its models."""

from __future__ import annotations

import pytest

from linrec.models import MODEL_CONFIGS
from linrec.testing import check_recommender, contract_split


@pytest.fixture(scope="module")
def split():
    return contract_split()


@pytest.mark.parametrize("name", sorted(MODEL_CONFIGS))
def test_the_recommender_contract(name, split, tmp_path):
    """Fit, scores, recommend, determinism, binary input, save and load, bad input."""
    check_recommender(name, split=split, tmp_path=tmp_path)

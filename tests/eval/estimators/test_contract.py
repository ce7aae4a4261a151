"""The estimator contract (`linrec.testing.check_estimator`, public for plugins) over every
registered estimator: P̂ of length n_items, finite curves, determinism, the sample-size check."""

from __future__ import annotations

import pytest

from linrec.eval.estimators import ESTIMATORS
from linrec.testing import check_estimator


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_the_estimator_contract(name):
    check_estimator(name)

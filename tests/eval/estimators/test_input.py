"""Input checks of the estimators (docs/concepts/sampled.md): a sampled rank out of range is named
with its range, and a per-target sample-size array of one common size is accepted."""

from __future__ import annotations

import numpy as np
import pytest

from linrec.errors import ConfigError
from linrec.eval.estimators import estimate
from tests.eval.estimators.conftest import draw


@pytest.mark.parametrize("bad", [0, 21, -3])
def test_rank_out_of_range_names_value_and_range(bad):
    sampled = np.array([1, 2, bad, 4])
    with pytest.raises(ConfigError, match=rf"sampled rank {bad} .*\[1, 20\]"):
        estimate("mle", sampled, n_items=400, sample_size=20)


def test_homogeneous_size_array_is_accepted():
    _, sampled = draw(400, 20, 300, seed=1)
    a = estimate("bv", sampled, n_items=400, sample_size=np.full(300, 20))
    b = estimate("bv", sampled, n_items=400, sample_size=20)
    np.testing.assert_array_equal(a.p_hat, b.p_hat)

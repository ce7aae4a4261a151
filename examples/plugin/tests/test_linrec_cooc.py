"""The plugin's tests: linrec's own contract checks (linrec.testing), and each piece against a
computation written out here."""

import linrec_cooc  # noqa: F401 - registers the plugin's pieces (an installed plugin is also
import numpy as np
import pytest
import scipy.sparse as sp
import torch

# loaded by linrec's commands through its entry point)
from linrec.eval.estimators import estimate
from linrec.models import build_model
from linrec.models.losses import loss_config
from linrec.testing import check_estimator, check_loss, check_recommender


def test_the_model_keeps_linrecs_recommender_contract(tmp_path):
    check_recommender("cooccurrence", tmp_path=tmp_path)


def test_the_loss_keeps_linrecs_loss_contract():
    check_loss("squared_hinge")


def test_the_estimator_keeps_linrecs_estimator_contract():
    check_estimator("rank_mapping")


def test_scores_are_the_normalised_cooccurrences():
    X = sp.csr_matrix(np.array([[1, 1, 0, 1], [1, 0, 1, 0], [0, 1, 1, 1]], dtype=np.float32))
    model = build_model("cooccurrence", shrink=2.0).fit(X)
    dense = X.toarray()
    expected = np.zeros((3, 4))
    for u in range(3):
        for j in range(4):
            expected[u, j] = sum(
                (dense[:, i] @ dense[:, j]) / (dense[:, i].sum() + 2.0)
                for i in range(4) if dense[u, i] and i != j)
    np.testing.assert_allclose(model.score(X, np.arange(3)), expected, rtol=1e-6)


def test_the_loss_is_the_squared_hinge():
    s_pos = torch.tensor([0.5, -0.2])
    s_neg = torch.tensor([[0.1, 0.9], [-0.5, 0.3]])
    values = loss_config("squared_hinge", margin=0.4)(s_pos, s_neg)
    expected = [np.mean([max(0.0, 0.4 - 0.5 + 0.1) ** 2, max(0.0, 0.4 - 0.5 + 0.9) ** 2]),
                np.mean([max(0.0, 0.4 + 0.2 - 0.5) ** 2, max(0.0, 0.4 + 0.2 + 0.3) ** 2])]
    np.testing.assert_allclose(values.numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("n_items, sample_size", [(1000, 100), (37, 5)])
def test_the_estimator_maps_each_sampled_rank_to_one_global_rank(n_items, sample_size):
    ranks = np.array([1, 1, 2, sample_size])
    p_hat = estimate("rank_mapping", ranks, n_items=n_items, sample_size=sample_size).p_hat
    expected = np.zeros(n_items)
    for r in ranks:
        expected[int((r - 1) * (n_items - 1) // (sample_size - 1))] += 1 / len(ranks)
    np.testing.assert_allclose(p_hat, expected, atol=1e-15)

"""The MF trainer's samplers (linrec.models.samplers): uniform and popularity negatives by a
chi-square test, the unlabelled pool, positives from the user's items, the τ⁺ priors, seeding."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy import stats

from linrec.errors import ConfigError
from linrec.models.positive_prior import TAU_MAX
from linrec.models.samplers import SamplingConfig, TrainingSampler

N_USERS, N_ITEMS = 30, 12


def train() -> sp.csr_matrix:
    rng = np.random.default_rng(0)
    dense = rng.random((N_USERS, N_ITEMS)) < 0.3
    dense[:, 0] = True  # every user has an item; item 0 is popular
    return sp.csr_matrix(dense.astype(np.float32))


def sampler(seed: int = 0, **params) -> TrainingSampler:
    return TrainingSampler(SamplingConfig(**params), train(), "cpu",
                           torch.Generator().manual_seed(seed))


def _pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = np.asarray(probs, dtype=np.float64)
    expected = expected / expected.sum() * counts.sum()
    return stats.chisquare(counts, expected).pvalue


def test_uniform_negatives_over_all_items():
    s = sampler(n_negatives=200)
    users = torch.arange(N_USERS)
    items, logq = s.negatives(users)
    assert items.shape == (N_USERS, 200) and torch.allclose(logq, torch.tensor(-math.log(12)))
    counts = np.bincount(items.numpy().ravel(), minlength=N_ITEMS)
    assert _pvalue(counts, np.ones(N_ITEMS)) > 1e-3


def test_popularity_negatives_follow_popularity_to_the_beta():
    x = train()
    popularity = np.asarray(x.sum(axis=0)).ravel()
    s = sampler(n_negatives=500, pool="popularity", popularity_beta=0.5)
    items, logq = s.negatives(torch.arange(N_USERS))
    probs = popularity ** 0.5 / (popularity ** 0.5).sum()
    np.testing.assert_allclose(logq.numpy(), np.log(probs)[items.numpy()], rtol=1e-5)
    assert _pvalue(np.bincount(items.numpy().ravel(), minlength=N_ITEMS), probs) > 1e-3


def test_unlabeled_negatives_avoid_the_users_items_and_are_uniform_over_the_rest():
    x = train()
    s = sampler(n_negatives=300, pool="unlabeled")
    users = torch.arange(N_USERS)
    items, logq = s.negatives(users)
    dense = x.toarray() > 0
    assert not dense[users.numpy()[:, None], items.numpy()].any()
    np.testing.assert_allclose(logq[:, 0].numpy(), -np.log(N_ITEMS - dense.sum(1)), rtol=1e-6)
    free = np.flatnonzero(~dense[3])
    counts = np.bincount(items[3].numpy(), minlength=N_ITEMS)[free]
    assert _pvalue(counts, np.ones(len(free))) > 1e-3


def test_shared_negatives_are_one_set_per_batch():
    items, logq = sampler(negatives="shared", n_negatives=7).negatives(torch.arange(5))
    assert items.shape == (7,) and logq.shape == (7,)
    with pytest.raises(ConfigError, match="pool=unlabeled needs per-example negatives"):
        SamplingConfig(negatives="shared", pool="unlabeled")


def test_positives_come_from_the_users_items_uniformly():
    x = train()
    s = sampler(n_positives=400)
    users = torch.tensor([1, 4, 4])
    extra = s.positives(users).numpy()
    for row, user in zip(extra, users.tolist(), strict=True):
        own = x.indices[x.indptr[user]:x.indptr[user + 1]]
        assert set(row) <= set(own)
        assert _pvalue(np.bincount(row, minlength=N_ITEMS)[own], np.ones(len(own))) > 1e-3


def test_pair_examples_are_every_training_pair_once_an_epoch():
    x = train()
    pairs = sampler().epoch_examples().numpy()
    assert sorted(pairs) == list(range(x.nnz))  # a permutation of the CSR positions
    assert not np.array_equal(pairs, np.arange(x.nnz))


def test_user_examples_draw_a_user_uniformly_then_one_of_their_items():
    """LightGCN's sampling: users uniform (light and heavy alike), then an item of the user
    uniformly; a user without training items is never drawn. Checked over 60 epochs by
    chi-square against those two distributions, computed from the matrix."""
    x = train().tolil()
    x[7] = 0  # a user with no training item
    x = x.tocsr()
    x.eliminate_zeros()
    s = TrainingSampler(SamplingConfig(examples="users"), x, "cpu",
                        torch.Generator().manual_seed(0))
    pairs = np.concatenate([s.epoch_examples().numpy() for _ in range(60)])
    assert len(pairs) == 60 * x.nnz  # an epoch has as many examples as training pairs
    users = np.repeat(np.arange(N_USERS), np.diff(x.indptr))[pairs]
    user_counts = np.bincount(users, minlength=N_USERS)
    assert user_counts[7] == 0
    active = np.flatnonzero(np.diff(x.indptr))
    assert _pvalue(user_counts[active], np.ones(len(active))) > 1e-3
    for user in (0, 4):  # its items equally often
        own = pairs[users == user]
        counts = np.bincount(own - x.indptr[user], minlength=x.indptr[user + 1] - x.indptr[user])
        assert _pvalue(counts, np.ones(len(counts))) > 1e-3
    # pair-uniform sampling would weigh users by their counts: far from this
    degrees = np.diff(x.indptr)[active]
    assert _pvalue(user_counts[active], degrees) < 1e-6


@pytest.mark.parametrize("prior, params, want", [
    ("count_k", {"prior_k": 2}, lambda c: (c + 2) / N_ITEMS),
    ("ratio_alpha", {"prior_alpha": 0.5}, lambda c: 1.5 * c / N_ITEMS),
    ("fixed", {"tau_plus": 0.2}, lambda c: np.full_like(c, 0.2)),
])
def test_tau_plus_priors(prior, params, want):
    counts = np.diff(train().indptr).astype(np.float64)
    got = sampler(prior=prior, **params).tau_plus(torch.arange(N_USERS)).numpy()
    np.testing.assert_allclose(got, np.clip(want(counts), 0, TAU_MAX), rtol=1e-6)
    clipped = sampler(prior="count_k", prior_k=100).tau_plus(torch.arange(3)).numpy()
    assert np.all(clipped == np.float32(TAU_MAX))


def test_draws_follow_the_seed():
    a, _ = sampler(seed=3).negatives(torch.arange(4))
    b, _ = sampler(seed=3).negatives(torch.arange(4))
    c, _ = sampler(seed=4).negatives(torch.arange(4))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("params, match", [
    ({"n_negatives": 0}, "n_negatives=0 is out of range"),
    ({"pool": "nearby"}, r"pool='nearby' is not allowed; allowed: \['all'"),
    ({"tau_plus": 1.0}, r"tau_plus=1.0 is out of range"),
    ({"prior": "guess"}, "prior='guess' is not allowed"),
])
def test_bad_sampler_settings(params, match):
    with pytest.raises(ConfigError, match=match):
        SamplingConfig(**params)

"""Ranking on the scores' device (`ranks.device_batch_ranks`, `linrec.eval.device_ranks`)
against the per-user brute force, on CPU tensors (the same code as on a GPU) and on a CUDA
device where there is one; and the evaluator's choice of that path."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from linrec.data.splits import EvalSet
from linrec.errors import DataError
from linrec.eval.exact import evaluate_exact
from linrec.eval.ranks import BatchKeys, device_batch_ranks, device_batch_rows, ranked_batches
from tests.conftest import LinearScores, make_evalset
from tests.eval.conftest import brute_force_ranks, rank_dict


class OnDevice:
    """A scorer whose scores lie on `device` (a LinearScores underneath); counts its calls."""

    scores_on_device = True

    def __init__(self, inner: LinearScores, device: str) -> None:
        self.inner, self.score_device = inner, torch.device(device)
        self.host_calls = self.device_calls = 0

    def score(self, foldin, users=None):
        self.host_calls += 1
        return self.inner.score(foldin, users)

    def score_tensor(self, foldin, users=None):
        self.device_calls += 1
        return torch.from_numpy(self.inner.score(foldin, users)).to(self.score_device)


@pytest.mark.parametrize("case", range(10))
def test_device_ranks_match_brute_force(case, device):
    """Ties of every kind (rounded scores, whole rows tied, targets tying fold-in items), both
    float widths, and count chunks of one held-out item to all of them."""
    rng = np.random.default_rng(case)
    n_users, n_items = int(rng.integers(1, 15)), int(rng.integers(3, 70))
    evalset = make_evalset(n_users, n_items, seed=case, foldin_p=rng.uniform(0, 0.6))
    scores = rng.normal(size=(n_users, n_items))
    if case % 2:
        scores = np.round(scores, 0)
    if case % 3 == 0:
        scores = scores.astype(np.float32)
    if case % 4 == 3:
        scores[: n_users // 2] = 0.0
    expected = brute_force_ranks(scores, evalset, 9)
    keys = BatchKeys(9, evalset.users, n_items)
    chunk = [1, n_items, 10**9][case % 3]
    batch = device_batch_ranks(torch.from_numpy(scores.copy()).to(device), evalset.foldin,
                               evalset.targets, keys, chunk_elements=chunk)
    assert rank_dict(batch) == expected
    np.testing.assert_array_equal(batch.target_scores, scores[batch.rows, batch.items])
    foldin, targets = evalset.foldin.toarray() > 0, evalset.targets.toarray() > 0
    candidates = n_items - foldin.sum(1) - targets.sum(1) + 1
    np.testing.assert_array_equal(batch.n_candidates, candidates[batch.rows])
    assert np.all(np.lexsort((batch.ranks, batch.rows)) == np.arange(len(batch.ranks)))


def test_extreme_and_half_precision_scores(device):
    evalset = make_evalset(4, 30, seed=3, min_targets=2)
    rng = np.random.default_rng(3)
    values = np.array([-3e38, -1e-30, -0.0, 0.0, 1e-45, 1e-30, 2.5, 3e38], dtype=np.float32)
    scores = values[rng.integers(0, len(values), size=(4, 30))]
    keys = BatchKeys(1, evalset.users, 30)
    got = device_batch_ranks(torch.from_numpy(scores.copy()).to(device), evalset.foldin,
                             evalset.targets, keys)
    assert rank_dict(got) == brute_force_ranks(scores, evalset, 1)
    half = np.round(rng.normal(size=(4, 30)), 1).astype(np.float16)
    got = device_batch_ranks(torch.from_numpy(half.copy()).to(device), evalset.foldin,
                             evalset.targets, keys)
    assert rank_dict(got) == brute_force_ranks(half.astype(np.float32), evalset, 1)


def test_bad_scores_and_overlapping_rows_name_the_problem():
    evalset = make_evalset(5, 20, seed=2, min_targets=1)
    keys = BatchKeys(0, evalset.users, 20)
    scores = torch.zeros(5, 20)
    scores[3, 7] = float("nan")
    with pytest.raises(DataError, match="batch row 3 contain NaN or inf"):
        device_batch_ranks(scores, evalset.foldin, evalset.targets, keys)
    overlap = EvalSet(evalset.users, evalset.targets, evalset.targets)
    with pytest.raises(DataError, match="must be disjoint"):
        device_batch_ranks(torch.zeros(5, 20), overlap.foldin, overlap.targets, keys)


@pytest.mark.parametrize("users_known", [True, False])
def test_the_evaluator_ranks_on_the_device_unless_a_hook_needs_the_scores(users_known, device):
    """Without hooks the batches are scored and ranked on the device (no host scores), with the
    host pass's metrics to the last digit; with a hook they come back through one host buffer
    and are ranked there, the hook seeing each batch's scores."""
    evalset = make_evalset(40, 60, seed=5, min_targets=1)
    inner = LinearScores(60, seed=1, decimals=1)
    host = evaluate_exact(inner, evalset, ks=[5, 20], metrics=["recall", "ndcg", "mrr"], seed=3,
                          users_known=users_known, batch_size=7)
    model = OnDevice(inner, device)
    on_device = evaluate_exact(model, evalset, ks=[5, 20], metrics=["recall", "ndcg", "mrr"],
                               seed=3, users_known=users_known, batch_size=7)
    assert (model.device_calls, model.host_calls) == (6, 0)
    assert on_device.metrics == host.metrics
    for name in ("rows", "users", "items", "ranks", "n_candidates"):
        np.testing.assert_array_equal(getattr(on_device.rank_table, name),
                                      getattr(host.rank_table, name))
    seen = []

    def hook(rows, scores, keys, ranks):  # the host copy of the device batch, masked
        expected = inner.score(evalset.foldin[rows], evalset.users[rows] if users_known else None)
        foldin = evalset.foldin[rows].toarray() > 0
        assert np.all(np.isneginf(scores[foldin]))
        np.testing.assert_array_equal(scores[~foldin], expected[~foldin])
        seen.append(type(scores))

    hooked = evaluate_exact(model, evalset, ks=[5, 20], metrics=["recall", "ndcg", "mrr"],
                            seed=3, users_known=users_known, batch_size=7, batch_hooks=[hook])
    assert (model.device_calls, model.host_calls) == (12, 0) and seen == [np.ndarray] * 6
    assert hooked.metrics == host.metrics


def test_device_batches_are_sized_by_the_device_and_carry_no_scores():
    evalset = make_evalset(30, 50, seed=6, min_targets=1)
    model = OnDevice(LinearScores(50), "cpu")
    batches = list(ranked_batches(model, evalset, seed=0, users_known=True, host_scores=False))
    rows = device_batch_rows(torch.device("cpu"), 50)
    assert len(batches) == -(-30 // rows) and all(b.scores is None for b in batches)
    assert device_batch_rows(torch.device("cpu"), 2**40) == 1


def test_a_wrong_shape_from_the_device_scorer_is_named():
    evalset = make_evalset(6, 10, seed=1, min_targets=1)

    class Short(OnDevice):
        def score_tensor(self, foldin, users=None):
            return torch.zeros(foldin.shape[0], 9)

    with pytest.raises(DataError, match=r"Short.score_tensor returned shape \(6, 9\)"):
        evaluate_exact(Short(LinearScores(10), "cpu"), evalset, ks=[5], metrics=["recall"],
                       seed=0, users_known=True)


def test_mf_serves_device_scores_only_from_a_gpu(device):
    """A CPU-trained MF scores on the host; on a GPU its tensor is `score`'s rows."""
    from linrec.models.mf import MF

    train = sp.random(30, 25, density=0.2, random_state=0, format="csr")
    model = MF(dim=4, epochs=1, device=device).fit(train)
    assert model.scores_on_device == (device != "cpu")
    if device != "cpu":
        users = np.arange(30)
        np.testing.assert_array_equal(model.score_tensor(train, users).cpu().numpy(),
                                      model.score(train, users))


def test_the_device_path_passes_its_users_sizes_and_precision_on():
    """A device scorer that needs the users gets them on the device path; with the default
    host_scores its batches come back as float32 host arrays (a float16 device batch widened),
    sized by the memory budget; off a GPU a batch holds 512 MiB of 8-byte cells, whatever the
    fraction."""
    from linrec.hardware import batch_size_for

    evalset = make_evalset(30, 50, seed=6, min_targets=1)

    class NeedsUsers(OnDevice):
        def score_tensor(self, foldin, users=None):
            assert users is not None, "the users were not passed on"
            return super().score_tensor(foldin, users).to(torch.float16)

    host = list(ranked_batches(LinearScores(50), evalset, seed=0, users_known=True,
                               batch_size=30))
    model = NeedsUsers(LinearScores(50), "cpu")
    on_device = list(ranked_batches(model, evalset, seed=0, users_known=True,
                                    host_scores=False, batch_size=30))
    assert len(on_device) == 1 and on_device[0].scores is None
    budget = 0.004
    copies = list(ranked_batches(model, evalset, seed=0, users_known=True,
                                 memory_budget_mb=budget))
    rows = batch_size_for(50, budget)
    assert 1 < rows < 30 and len(copies) == -(-30 // rows)
    assert all(b.scores is not None and b.scores.dtype == np.float32 for b in copies)
    # float16 device scores tie more than the host's float64: compare with the same scores
    assert len(host) == 1 and len(rank_dict(on_device[0].ranks)) == len(rank_dict(host[0].ranks))
    for n_items in (1, 1000):
        for fraction in (0.25, 0.5):
            assert device_batch_rows(torch.device("cpu"), n_items, fraction) == \
                512 * 2**20 // (8 * n_items)

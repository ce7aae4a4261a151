"""What the MF trainer hands its loss, recomputed from the embedding tables alone: on each
scoring path (full catalogue, shared negatives, per-example negatives through `sampled_dot`),
with cosine or dot scores over the temperature, the user-embedding dropout, the log sampling
probabilities, the prior τ⁺ of each user and the score floor, for every one of the thirteen
losses, on the CPU and on a CUDA device. The draws (items and dropout masks) are taken from the
sampler and the generator as they made them; every number a loss receives is then checked in
float64 against numpy, not against the trainer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from linrec.data.pipeline import prepare_data
from linrec.models import MF
from linrec.models.losses import LOSS_CONFIGS
from linrec.models.mf import MFTrainer


@pytest.fixture(scope="module")
def train():
    return prepare_data({"source": {"name": "synthetic", "n_users": 120, "n_items": 60,
                                    "mean_user_interactions": 10.0, "seed": 3},
                         "split": {"kind": "holdout", "valid_fraction": 0.0},
                         "cache": False}).split.train.tocsr()


def _loss_inputs(model: MF, train, monkeypatch) -> tuple[dict, dict, torch.Tensor, MFTrainer]:
    """(the arguments of the loss's one call on a batch, the sampler's draws, the batch,
    the trainer), on the model's device."""
    generator = torch.Generator(device=model.device).manual_seed(0)
    model._init_tables(*train.shape, generator)
    trainer = MFTrainer(model, train, generator)
    # tables far from their small initialisation, so that every score is distinct
    with torch.no_grad():
        model._users.normal_(generator=generator)
        model._items.normal_(generator=generator)
    calls, drawn = [], {}
    real_rand = torch.rand

    def recorded_rand(*args, **kwargs):  # the dropout mask's draws: one per user-row entry
        values = real_rand(*args, **kwargs)
        if values.ndim == 2 and values.shape[1] == model.dim:
            drawn["dropout"] = values
        return values

    monkeypatch.setattr(torch, "rand", recorded_rand)
    loss_class = type(model.loss)
    real_call = loss_class.__call__

    def recorded(self, s_pos, s_neg, s_ppos=None, tau_plus=0.0, neg_logq=None,
                 score_floor=-math.inf, **kwargs):
        calls.append({"s_pos": s_pos, "s_neg": s_neg, "s_ppos": s_ppos, "tau_plus": tau_plus,
                      "neg_logq": neg_logq, "score_floor": score_floor})
        return real_call(self, s_pos, s_neg, s_ppos, tau_plus, neg_logq, score_floor, **kwargs)

    monkeypatch.setattr(loss_class, "__call__", recorded)
    for name in ("negatives", "positives"):
        draw = getattr(trainer.sampler, name)
        monkeypatch.setattr(trainer.sampler, name,
                            lambda users, draw=draw, name=name: drawn.setdefault(name,
                                                                                 draw(users)))
    batch = torch.arange(5, 5 + 3 * 17, 3, device=model.device)
    with torch.no_grad():
        trainer._batch_loss(batch)
    assert len(calls) == 1
    return calls[0], drawn, batch, trainer


def _np(x) -> np.ndarray:
    return x.detach().cpu().double().numpy()


def _popularity_logq(train, beta: float) -> np.ndarray:
    """log q(j) of the popularity pool, q ∝ (training count of j)^beta: float64 (n_items,)."""
    popularity = np.asarray((train != 0).sum(0)).ravel() ** beta
    return np.log(popularity / popularity.sum())


def _same_products(got, want: np.ndarray, magnitude: np.ndarray) -> None:
    """got (float32 products of d terms) within d·2⁻²³·Σ|terms| of want (float64): the
    rounding bound of a float32 dot product, doubled for the rounded inputs."""
    dim = 64
    error = np.abs(_np(got) - want)
    assert np.all(error <= 2 * dim * 2.0 ** -24 * magnitude + 1e-12), error.max()


def _expected_scores(model: MF, users, cosine: bool, temperature: float, drawn: dict):
    """The user rows (normalised, dropped out with the trainer's draws, over t) and the item
    rows of the scores, in float64."""
    u, v = _np(model._users)[users], _np(model._items)
    if cosine:
        u = u / np.linalg.norm(u, axis=1, keepdims=True)
        v = v / np.linalg.norm(v, axis=1, keepdims=True)
    if model.dropout > 0:
        keep = _np(drawn["dropout"]) >= model.dropout
        u = u * keep / (1.0 - model.dropout)
    else:
        assert "dropout" not in drawn
    return u / temperature, v


CASES = {
    "per-example, cosine, log q of popularity": dict(
        loss={"name": "sampled_softmax"}, temperature=0.2,
        sampling={"n_negatives": 7, "pool": "popularity", "popularity_beta": 0.5}),
    "shared, cosine, log q of popularity": dict(
        loss={"name": "sampled_softmax"}, temperature=0.2,
        sampling={"negatives": "shared", "n_negatives": 7, "pool": "popularity",
                  "popularity_beta": 0.5}),
    "shared, cosine, count_k prior": dict(
        loss={"name": "debiased_ccl"}, temperature=1.0,
        sampling={"negatives": "shared", "n_negatives": 9, "n_positives": 4,
                  "prior": "count_k", "prior_k": 3}),
    "per-example, cosine, ratio_alpha prior": dict(
        loss={"name": "debiased_infonce"}, temperature=0.3,
        sampling={"n_negatives": 6, "n_positives": 5, "prior": "ratio_alpha",
                  "prior_alpha": 0.5}),
    "full catalogue, dot": dict(loss={"name": "softmax"}, similarity="dot", temperature=0.5),
    # t = 2: the scores are divided whatever t is, 1 alone excepted
    "full catalogue, dot, t 2": dict(loss={"name": "softmax"}, similarity="dot",
                                     temperature=2.0),
}
#: every loss at t ≠ 1 with dropout, on the negatives path it supports, shared negatives with
#: the row-wise sparse Adam
for _index, _name in enumerate(sorted(LOSS_CONFIGS)):
    _loss = LOSS_CONFIGS[_name]
    _shared = not _loss.full_catalogue and _index % 2 == 0
    _sampling = {"n_negatives": 6}
    if _loss.positives:
        _sampling["n_positives"] = 3
    if _loss.logq:
        _sampling.update(pool="popularity", popularity_beta=0.5)
    if _shared:
        _sampling["negatives"] = "shared"
    CASES[f"{_name}, dropout 0.3, t 0.4" + (", shared, sparse_adam" if _shared else "")] = dict(
        loss={"name": _name}, temperature=0.4, dropout=0.3, sampling=_sampling,
        optimizer="sparse_adam" if _shared else "adam",
        reg_mode="batch_rows" if _shared else "full_table")


@pytest.mark.parametrize("case", list(CASES))
def test_the_loss_gets_the_scores_of_the_tables(train, monkeypatch, tmp_path, case, device):
    settings = CASES[case]
    model = MF(checkpoint_dir=str(tmp_path), device=device, **{"dropout": 0.0, **settings})
    got, drawn, batch, trainer = _loss_inputs(model, train, monkeypatch)
    cosine, t = model.similarity == "cosine", model.temperature
    users = _np(trainer.pair_users[batch]).astype(int)
    positives = _np(trainer.pair_items[batch]).astype(int)
    # the pairs are the training matrix's (user, item) entries
    assert all(train[u, i] != 0 for u, i in zip(users, positives, strict=True))
    u, v = _expected_scores(model, users, cosine, t, drawn)
    au, av = np.abs(u), np.abs(v)
    _same_products(got["s_pos"], (u * v[positives]).sum(1), (au * av[positives]).sum(1))
    loss = LOSS_CONFIGS[settings["loss"]["name"]]
    if loss.full_catalogue:
        assert "negatives" not in drawn
        _same_products(got["s_neg"], u @ v.T, au @ av.T)
    else:
        negatives = _np(drawn["negatives"][0]).astype(int)
        if negatives.ndim == 1:  # shared by the batch
            negatives = np.broadcast_to(negatives, (len(users), len(negatives)))
        _same_products(got["s_neg"], np.einsum("bd,bnd->bn", u, v[negatives]),
                       np.einsum("bd,bnd->bn", au, av[negatives]))
    if loss.positives:
        extra = _np(drawn["positives"]).astype(int)
        assert all(train[users[b], i] != 0 for b in range(len(users)) for i in extra[b])
        _same_products(got["s_ppos"], np.einsum("bd,bmd->bm", u, v[extra]),
                       np.einsum("bd,bmd->bm", au, av[extra]))
        counts = np.diff(train.indptr)[users].astype(float)
        sampling, n_items = model.sampling, train.shape[1]
        tau = {"count_k": lambda c: (c + sampling.prior_k) / n_items,
               "ratio_alpha": lambda c: (1 + sampling.prior_alpha) * c / n_items}[
            sampling.prior](counts)
        np.testing.assert_allclose(_np(got["tau_plus"]), np.minimum(tau, 1 - 1e-6), rtol=1e-6)
    else:
        assert got["s_ppos"] is None and got["tau_plus"] == 0.0
    if loss.logq:
        logq = _popularity_logq(train, 0.5)
        # (B, N) on every path, shared negatives' one row expanded (the losses' contract)
        assert tuple(got["neg_logq"].shape) == negatives.shape == tuple(got["s_neg"].shape)
        np.testing.assert_allclose(_np(got["neg_logq"]), logq[negatives], rtol=1e-5)
    assert got["score_floor"] == (-1.0 / t if cosine else -math.inf)


def test_a_plugin_loss_over_the_full_catalogue_with_positives_gets_their_scores(
        train, monkeypatch, tmp_path):
    """No built-in loss scores the whole catalogue and also takes sampled positives; a plugin's
    may (the flags are public): its s_ppos are the full product's scores at the drawn positives,
    (B, M), beside s_neg = every item's score."""
    from dataclasses import dataclass

    from linrec.models.losses import LossConfig

    @dataclass
    class CatalogueWithPositives(LossConfig):
        full_catalogue = True
        positives = True
        name: str = "catalogue_with_positives"

        def __call__(self, s_pos, s_neg, s_ppos=None, tau_plus=0.0, neg_logq=None,
                     score_floor=-math.inf):
            return s_neg.logsumexp(1) - s_pos - s_ppos.mean(1)

    monkeypatch.setitem(LOSS_CONFIGS, "catalogue_with_positives", CatalogueWithPositives)
    model = MF(checkpoint_dir=str(tmp_path), loss={"name": "catalogue_with_positives"},
               similarity="dot", temperature=0.5, dropout=0.0, sampling={"n_positives": 3})
    got, drawn, batch, trainer = _loss_inputs(model, train, monkeypatch)
    users = _np(trainer.pair_users[batch]).astype(int)
    extra = _np(drawn["positives"]).astype(int)
    assert "negatives" not in drawn and extra.shape == (len(users), 3)
    u, v = _expected_scores(model, users, False, 0.5, drawn)
    au, av = np.abs(u), np.abs(v)
    _same_products(got["s_neg"], u @ v.T, au @ av.T)
    assert tuple(got["s_ppos"].shape) == extra.shape
    _same_products(got["s_ppos"], np.einsum("bd,bmd->bm", u, v[extra]),
                   np.einsum("bd,bmd->bm", au, av[extra]))


def test_a_plugin_loss_with_diagnostics_gets_the_log_q_of_its_negatives(train, monkeypatch,
                                                                        tmp_path):
    """A loss that writes diagnostics (`stats`) is called on their own branch of the step: a
    plugin's that also takes log q (no built-in loss does both) gets the (B, N) log q of its
    popularity negatives there, and its diagnostic is summed per example."""
    from dataclasses import dataclass

    from linrec.models.losses import LossConfig

    @dataclass
    class LogqWithStats(LossConfig):
        logq = True
        stats = ("mean_logq",)
        name: str = "logq_with_stats"

        def __call__(self, s_pos, s_neg, s_ppos=None, tau_plus=0.0, neg_logq=None,
                     score_floor=-math.inf, stats=None):
            if stats is not None:
                stats["mean_logq"] = neg_logq.mean().detach()
            return torch.cat([s_pos[:, None], s_neg - neg_logq], 1).logsumexp(1) - s_pos

    monkeypatch.setitem(LOSS_CONFIGS, "logq_with_stats", LogqWithStats)
    model = MF(checkpoint_dir=str(tmp_path), loss={"name": "logq_with_stats"}, dropout=0.0,
               sampling={"n_negatives": 5, "pool": "popularity", "popularity_beta": 0.5})
    got, drawn, batch, trainer = _loss_inputs(model, train, monkeypatch)
    negatives = _np(drawn["negatives"][0]).astype(int)
    logq = _popularity_logq(train, 0.5)[negatives]
    assert negatives.shape == (len(batch), 5)
    np.testing.assert_allclose(_np(got["neg_logq"]), logq, rtol=1e-5)
    np.testing.assert_allclose(float(trainer._stat_sums["mean_logq"]),
                               logq.mean() * len(batch), rtol=1e-5)

"""The losses of docs/concepts/losses.md against naive float64 formulas, their reductions to each
other (docs/concepts/losses.md), gradient checks, the bound inequalities of Li 2023, eqs. 87–91, and
numerical stability."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from linrec.errors import ConfigError
from linrec.models.losses import (
    LOSS_CONFIGS,
    BPRLoss,
    CCLLoss,
    DebiasedCCLLoss,
    DebiasedInfoNCELoss,
    DebiasedMSELoss,
    InfoNCELoss,
    InfoNCEPlusLoss,
    LinearPairwiseLoss,
    MINELoss,
    MINEPlusLoss,
    MSELoss,
    SampledSoftmaxLoss,
    SoftmaxLoss,
    loss_config,
)

B, N, M = 6, 9, 4
T = 0.5  # temperature of the cosine scores below


def batch(seed: int = 0, scale: float = 1.0 / T):
    """Cosine scores divided by t (in [−1/t, 1/t]), float64, and a per-row τ⁺."""
    g = torch.Generator().manual_seed(seed)
    s_pos = (torch.rand(B, generator=g, dtype=torch.float64) * 2 - 1) * scale
    s_neg = (torch.rand((B, N), generator=g, dtype=torch.float64) * 2 - 1) * scale
    s_ppos = (torch.rand((B, M), generator=g, dtype=torch.float64) * 2 - 1) * scale
    tau = torch.rand(B, generator=g, dtype=torch.float64) * 0.05
    return s_pos, s_neg, s_ppos, tau


def naive(name: str, cfg, s_pos, s_neg, s_ppos, tau, logq=None, floor=-1.0 / T) -> np.ndarray:
    """The papers' formulas written out per row with math (float64)."""
    out = []
    for b in range(B):
        p, neg = float(s_pos[b]), [float(x) for x in s_neg[b]]
        pp, t = [float(x) for x in s_ppos[b]], float(tau[b])
        e = math.exp
        if name in ("softmax", "mine"):
            v = -p + math.log(sum(e(x) for x in neg))
        elif name == "infonce":
            v = -p + math.log(e(p) + sum(e(x) for x in neg))
        elif name == "sampled_softmax":
            lq = [float(x) for x in logq[b]]
            shift = math.log(N) if cfg.logq_include_n else 0.0
            terms = (e(x - q - shift) for x, q in zip(neg, lq, strict=True))
            v = -p + math.log(e(p) + sum(terms))
        elif name == "debiased_infonce":
            pp = [p] if cfg.pos_correction == "anchor" else pp  # the anchor as the positive
            g = max((sum(e(x) for x in neg) / N - t * sum(e(x) for x in pp) / len(pp))
                    / (1 - t), e(floor))
            v = -math.log(e(p) / (e(p) + cfg.negative_weight * g))
        elif name == "mine_plus":
            v = -p + cfg.negative_weight * math.log(sum(e(x) for x in neg))
        elif name == "infonce_plus":
            v = -math.log(e(p) / (cfg.pos_weight * e(p) + cfg.negative_weight
                                  * sum(e(x) for x in neg)))
        elif name == "bpr":
            v = sum(math.log(1 + e(x - p)) for x in neg) / (N if cfg.reduction == "mean" else 1)
        elif name == "linear_pairwise":
            v = sum(x - p for x in neg) / N
        elif name in ("mse", "debiased_mse", "ccl", "debiased_ccl"):
            if name.endswith("mse"):
                positive, negative = (1 - p) ** 2, (lambda x: x * x)
            else:
                positive, negative = max(1 - p, 0.0), (lambda x: max(x - cfg.margin, 0.0))
            per = 1.0 if cfg.reduction == "sum" else float(N)  # sum, or mean over the N
            bracket = sum(negative(x) for x in neg) / per
            if name.startswith("debiased"):  # τ⁺ · (the same reduction of M positives' terms)
                bracket -= t * (N / per) * sum(negative(x) for x in pp) / M
            if cfg.clamp_neg_part_min is not None:
                bracket = max(bracket, cfg.clamp_neg_part_min)
            v = positive + cfg.negative_weight * bracket
        else:
            raise AssertionError(name)
        out.append(v)
    return np.array(out)


CONFIGS = {
    "infonce": InfoNCELoss(), "mine": MINELoss(), "mine_plus": MINEPlusLoss(negative_weight=1.2),
    "infonce_plus": InfoNCEPlusLoss(pos_weight=0.5, negative_weight=2.0), "bpr": BPRLoss(),
    "linear_pairwise": LinearPairwiseLoss(), "mse": MSELoss(negative_weight=3.0),
    "debiased_mse": DebiasedMSELoss(negative_weight=3.0), "ccl": CCLLoss(negative_weight=7.0),
    "debiased_ccl": DebiasedCCLLoss(negative_weight=7.0, margin=0.2),
    "debiased_infonce": DebiasedInfoNCELoss(negative_weight=float(N)),
    # the options
    "debiased_infonce:anchor": DebiasedInfoNCELoss(negative_weight=3.0, pos_correction="anchor"),
    "bpr:mean": BPRLoss(reduction="mean"),
    "mse:sum": MSELoss(negative_weight=0.5, reduction="sum"),
    "debiased_mse:clamp": DebiasedMSELoss(negative_weight=3.0, clamp_neg_part_min=0.9),
    "ccl:clamp": CCLLoss(negative_weight=7.0, margin=-0.2, clamp_neg_part_min=0.6),
    "debiased_ccl:sum,clamp": DebiasedCCLLoss(negative_weight=0.7, margin=0.2, reduction="sum",
                                              clamp_neg_part_min=0.5),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_loss_equals_its_formula(name):
    s_pos, s_neg, s_ppos, tau = batch()
    cfg = CONFIGS[name]
    if name == "debiased_infonce:anchor":
        tau = tau * 4  # so that the anchor's correction moves g
    got = cfg(s_pos, s_neg, s_ppos, tau, None, -1.0 / T).numpy()
    want = naive(name.partition(":")[0], cfg, s_pos, s_neg, s_ppos, tau)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    if "clamp" in name:  # the clamp acts on some rows and not on others
        unclamped = type(cfg)(**{**cfg.to_dict(), "clamp_neg_part_min": None})
        moved = got != unclamped(s_pos, s_neg, s_ppos, tau, None, -1.0 / T).numpy()
        assert moved.any() and not moved.all()


def test_softmax_and_sampled_softmax():
    s_pos, s_neg, s_ppos, tau = batch(1)
    np.testing.assert_allclose(SoftmaxLoss()(s_pos, s_neg).numpy(),
                               naive("softmax", None, s_pos, s_neg, s_ppos, tau), rtol=1e-12)
    # the softmax is the cross entropy over all items, the positive among them
    all_items = torch.cat([s_pos[:, None], s_neg], 1)
    np.testing.assert_allclose(
        SoftmaxLoss()(s_pos, all_items).numpy(),
        torch.nn.functional.cross_entropy(all_items, torch.zeros(B, dtype=torch.long),
                                          reduction="none").numpy(), rtol=1e-12)
    logq = torch.log(torch.rand((B, N), dtype=torch.float64) * 0.1 + 0.01)
    cfg = SampledSoftmaxLoss()
    np.testing.assert_allclose(cfg(s_pos, s_neg, neg_logq=logq).numpy(),
                               naive("sampled_softmax", cfg, s_pos, s_neg, s_ppos, tau, logq),
                               rtol=1e-12)
    literal = SampledSoftmaxLoss(logq_include_n=False)  # eq. 78 as printed: no log N
    np.testing.assert_allclose(literal(s_pos, s_neg, neg_logq=logq).numpy(),
                               naive("sampled_softmax", literal, s_pos, s_neg, s_ppos, tau,
                                     logq), rtol=1e-12)
    assert not np.allclose(literal(s_pos, s_neg, neg_logq=logq).numpy(),
                           cfg(s_pos, s_neg, neg_logq=logq).numpy())
    # uniform q over n = N items, every item drawn once: the full softmax over the items plus an
    # extra copy of the positive term (Li 2023, eq. 78)
    uniform = torch.full((B, N), -math.log(N), dtype=torch.float64)
    want = torch.logsumexp(torch.cat([s_pos[:, None], s_neg], 1), 1) - s_pos
    np.testing.assert_allclose(cfg(s_pos, s_neg, neg_logq=uniform).numpy(), want.numpy(),
                               rtol=1e-12)
    with pytest.raises(ConfigError, match="neg_logq"):
        cfg(s_pos, s_neg)


def test_reductions_between_losses():
    s_pos, s_neg, s_ppos, tau = batch(2)
    zero = torch.zeros(B, dtype=torch.float64)

    def same(a, b):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-13)

    # debiased forms with τ⁺ = 0 are their biased forms
    same(DebiasedCCLLoss(negative_weight=5.0)(s_pos, s_neg, s_ppos, zero),
         CCLLoss(negative_weight=5.0)(s_pos, s_neg))
    same(DebiasedMSELoss(negative_weight=5.0)(s_pos, s_neg, s_ppos, zero),
         MSELoss(negative_weight=5.0)(s_pos, s_neg))
    # debiased InfoNCE with τ⁺ = 0 and λ = N is InfoNCE (the floor never fires: e^s ≥ e^{−1/t})
    same(DebiasedInfoNCELoss(negative_weight=float(N))(s_pos, s_neg, s_ppos, zero, None,
                                                       -1.0 / T),
         InfoNCELoss()(s_pos, s_neg))
    # MINE+ with λ = 1 (and t = 1, the model's) is MINE; InfoNCE+ spans InfoNCE and MINE
    same(MINEPlusLoss(negative_weight=1.0)(s_pos, s_neg), MINELoss()(s_pos, s_neg))
    same(InfoNCEPlusLoss()(s_pos, s_neg), InfoNCELoss()(s_pos, s_neg))
    same(InfoNCEPlusLoss(pos_weight=0.0)(s_pos, s_neg), MINELoss()(s_pos, s_neg))
    # sum vs mean over the negatives: λ_sum · N = λ_mean
    same(CCLLoss(negative_weight=1.0, reduction="sum")(s_pos, s_neg),
         CCLLoss(negative_weight=float(N))(s_pos, s_neg))
    same(DebiasedCCLLoss(negative_weight=1.0, reduction="sum")(s_pos, s_neg, s_ppos, tau),
         DebiasedCCLLoss(negative_weight=float(N))(s_pos, s_neg, s_ppos, tau))
    # CCL is SimpleX's formula: relu(1 − pos) + w · relu(neg − margin).mean(−1)
    same(CCLLoss(negative_weight=150.0, margin=0.9)(s_pos, s_neg),
         torch.relu(1 - s_pos) + 150.0 * torch.relu(s_neg - 0.9).mean(-1))


def test_bounds_of_section_2():
    """InfoNCE ≥ MINE ≥ max_j d_j, the LogSumExp upper bound, Jensen's bound and BPR's, on
    every example (d_j = s_j − s_pos; Li 2023, eqs. 87–91, exact forms)."""
    for seed in range(5):
        s_pos, s_neg, _, _ = batch(seed, scale=3.0)
        d = s_neg - s_pos[:, None]
        info, mine = InfoNCELoss()(s_pos, s_neg), MINELoss()(s_pos, s_neg)
        assert torch.all(info >= mine - 1e-12)
        assert torch.all(mine >= d.max(1).values - 1e-12)
        assert torch.all(torch.clamp(d.max(1).values, min=0) + math.log(N + 1) >= info - 1e-12)
        assert torch.all(mine >= d.mean(1) + math.log(N) - 1e-12)  # Jensen
        bpr = BPRLoss()(s_pos, s_neg)
        assert torch.all(bpr >= torch.clamp(d, min=0).sum(1) - 1e-12)
        assert torch.all(bpr >= N * d.mean(1) - 1e-12)


def test_debiased_infonce_floor_fires_for_a_large_prior():
    s_pos, s_neg, s_ppos, _ = batch(3)
    big = torch.full((B,), 0.9, dtype=torch.float64)
    s_ppos = s_ppos.abs() + 1.0  # positives above every negative: the bracket goes negative
    cfg = DebiasedInfoNCELoss(negative_weight=float(N))
    got = cfg(s_pos, s_neg, s_ppos, big, None, -1.0 / T)
    floored = -s_pos + torch.log(torch.exp(s_pos) + N * math.exp(-1.0 / T))
    np.testing.assert_allclose(got.numpy(), floored.numpy(), rtol=1e-12)
    anchor = DebiasedInfoNCELoss(negative_weight=float(N), pos_correction="anchor")
    assert torch.isfinite(anchor(s_pos, s_neg, None, big, None, -1.0 / T)).all()


@pytest.mark.parametrize("name", sorted(CONFIGS) + ["softmax", "sampled_softmax"])
def test_gradients_match_finite_differences(name):
    cfg = CONFIGS.get(name) or LOSS_CONFIGS[name]()
    s_pos, s_neg, s_ppos, tau = batch(4)
    s_ppos = s_ppos * 0.3  # keep the debiased brackets away from their floor
    logq = torch.full((B, N), -math.log(40.0), dtype=torch.float64)

    def f(p, n, pp):
        return cfg(p, n, pp, tau, logq, -1.0 / T)

    args = tuple(x.clone().requires_grad_(True) for x in (s_pos, s_neg, s_ppos))
    if name in ("ccl", "debiased_ccl", "bpr", "linear_pairwise", "mse", "debiased_mse"):
        # kinks of relu: keep the points off them
        args = tuple((x + 0.01 * torch.sign(x - 0.2)).detach().requires_grad_(True)
                     for x in args)
    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-6)


def test_mine_plus_gradient_is_the_negatives_softmax():
    s_pos, s_neg, _, _ = batch(5)
    s_neg.requires_grad_(True)
    MINEPlusLoss(negative_weight=1.3)(s_pos, s_neg).sum().backward()
    np.testing.assert_allclose(s_neg.grad.numpy(),
                               (1.3 * torch.softmax(s_neg.detach(), 1)).numpy(), rtol=1e-12)


@pytest.mark.parametrize("name, params, match", [
    ("ccl", {"margin": 1.0}, r"loss.margin=1.0 is out of range; allowed: a number > -1 and < 1"),
    ("ccl", {"margin": -1.5}, "margin"),
    ("mine_plus", {"negative_weight": 0.0}, "negative_weight"),
    ("bpr", {"reduction": "max"}, r"reduction='max' is not allowed"),
    ("nosuch", {}, r"loss.name='nosuch' is unknown; allowed: \['bpr', 'ccl'"),
])
def test_bad_loss_settings(name, params, match):
    with pytest.raises(ConfigError, match=match):
        loss_config(name, **params)

"""Recommendation losses of the dissertation's chapter 4 (Li 2023, §4.2–4.3; Jin & Li 2023;
docs/concepts/losses.md), one typed config per loss (`loss=<name>`), each computing per-example
values on one batch layout:

    s_pos (B,)     score of each training pair (u, i)
    s_neg (B, N)   scores of the N items drawn for the row (all items for the full softmax)
    s_ppos (B, M)  scores of M extra positives of u (debiased losses only)
    tau_plus (B,)  the positive-class prior τ⁺_u (debiased losses only)
    neg_logq (B, N)  log sampling probability of each drawn item (sampled softmax only)

Scores are what the model emits: cosine or dot product, already divided by the temperature t.
`score_floor` is the smallest score the model can emit (−1/t for cosine, −inf for dot); the
debiased InfoNCE floors its negative term at e^{score_floor}. Every loss works in log space
(log-sum-exp with the row maximum subtracted), so it stays finite at t = 0.02 and at logits of 1e4,
and so do its gradients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from linrec.errors import ConfigError
from linrec.params import Params, chosen_config, param
from linrec.registry import Registry

if TYPE_CHECKING:
    import torch

REDUCTIONS = ("mean", "sum")


@dataclass
class LossConfig(Params):
    """Base of the loss configs. Class attributes say what the trainer must supply:
    `full_catalogue` (s_neg = all items, no sampling), `positives` (s_ppos and tau_plus),
    `logq` (neg_logq), `cosine` (the loss is defined for cosine scores only). `stats` names the
    per-batch diagnostics a loss writes into the `stats` dict the trainer then passes
    (0-d tensors, kept on the device; the trainer logs their epoch means)."""

    where = "loss"
    stats: ClassVar[tuple[str, ...]] = ()
    full_catalogue: ClassVar[bool] = False
    positives: ClassVar[bool] = False
    logq: ClassVar[bool] = False
    cosine: ClassVar[bool] = False

    name: str = ""

    def check(self) -> None:
        expected = type(self).__dataclass_fields__["name"].default
        if self.name != expected:
            raise ConfigError(f"loss.name={self.name!r} does not match its config "
                              f"{type(self).__name__} ({expected!r}); choose with loss=<name>")

    def __call__(self, s_pos: torch.Tensor, s_neg: torch.Tensor,
                 s_ppos: torch.Tensor | None = None, tau_plus: torch.Tensor | float = 0.0,
                 neg_logq: torch.Tensor | None = None,
                 score_floor: float = -math.inf) -> torch.Tensor:
        """Per-example loss values (B,) (reduction "none")."""
        raise NotImplementedError


def _reduce(values: torch.Tensor, how: str) -> torch.Tensor:
    """Mean or sum over the last axis. The mean is the sum divided by the count (what
    `mean` computes), whose backward is an expanded view, not the (B, N) tensor that
    `mean`'s backward writes."""
    total = values.sum(-1)
    return total / values.shape[-1] if how == "mean" else total


def _cat_pos(s_pos: torch.Tensor, s_neg: torch.Tensor) -> torch.Tensor:
    return _torch().cat([s_pos[:, None], s_neg], dim=1)


def _torch():
    import torch

    return torch


# --- listwise (Li 2023, §4.2) ---------------------------------------------------------------------


@dataclass
class SampledSoftmaxLoss(LossConfig):
    """Sampled softmax with the log-q correction (eq. 78): −s_pos + log(e^{s_pos} +
    Σ_j e^{s_j − log q_j − c}), c = log N (logq_include_n: the unbiased estimate of the
    partition function; false: the literal eq. 78)."""

    logq = True
    name: str = "sampled_softmax"
    logq_include_n: bool = param(True,
                                 doc="subtract log N as well (the unbiased estimate of the "
                                     "partition function); false: the literal eq. 78")

    def __call__(self, s_pos, s_neg, s_ppos=None, tau_plus=0.0, neg_logq=None,
                 score_floor=-math.inf):
        if neg_logq is None:
            raise ConfigError("sampled_softmax needs the log sampling probabilities neg_logq")
        shift = math.log(s_neg.shape[1]) if self.logq_include_n else 0.0
        return -s_pos + _torch().logsumexp(_cat_pos(s_pos, s_neg - neg_logq - shift), dim=1)


@dataclass
class InfoNCELoss(LossConfig):
    """InfoNCE (eq. 80): −s_pos + log(e^{s_pos} + Σ_j e^{s_j}), negatives from all items."""

    name: str = "infonce"

    def __call__(self, s_pos, s_neg, s_ppos=None, tau_plus=0.0, neg_logq=None,
                 score_floor=-math.inf):
        return -s_pos + _torch().logsumexp(_cat_pos(s_pos, s_neg), dim=1)


@dataclass
class DebiasedInfoNCELoss(LossConfig):
    """Debiased InfoNCE (eq. 83, Li 2023, eqs. 81–83): −s_pos + log(e^{s_pos} + λ g), g =
    max{(mean_j e^{s_j} − τ⁺ mean_k e^{s_k}) / (1 − τ⁺), e^{−1/t}}, in the stable max-shifted form
    (log-sum-exp of both means). pos_correction "sampled" uses the M sampled positives, "anchor" the
    anchor positive itself (Chuang et al.'s code). Cosine scores only (the floor e^{−1/t} is their
    minimum)."""

    positives = True
    cosine = True
    stats = ("clamped_fraction",)
    name: str = "debiased_infonce"
    negative_weight: float = param(800.0, gt=0, doc="λ; λ = N with τ⁺ = 0 is InfoNCE")
    pos_correction: str = param("sampled", choices=("sampled", "anchor"),
                                doc="sampled: the M sampled positives estimate the positive "
                                    "term; anchor: the anchor positive itself")

    def __call__(self, s_pos, s_neg, s_ppos=None, tau_plus=0.0, neg_logq=None,
                 score_floor=-math.inf, stats=None):
        """stats (a dict, optional) receives "clamped_fraction": the share of rows whose g sits
        on its floor, where every negative gets zero gradient (Li 2023, eqs. 81–83: log it)."""
        torch = _torch()
        positives = s_pos[:, None] if self.pos_correction == "anchor" else s_ppos
        if positives is None:
            raise ConfigError("debiased_infonce needs the sampled positives s_ppos")
        tau = torch.as_tensor(tau_plus, dtype=s_pos.dtype, device=s_pos.device)
        # log g in log space: log A + log(1 − τ⁺P/A) − log(1 − τ⁺), floored at score_floor.
        # Both means are log-sum-exps, so nothing under- or overflows even when the scores
        # span 1e4; the floor branch gets no gradient, as the clamp of the paper's form.
        log_a = torch.logsumexp(s_neg, 1) - math.log(s_neg.shape[1])
        log_p = torch.logsumexp(positives, 1) - math.log(positives.shape[1])
        log_r = torch.log(tau) + log_p - log_a
        above = log_r < 0
        ratio = torch.exp(torch.where(above, log_r, -math.inf))
        log_g = torch.where(above, log_a + torch.log1p(-ratio), -math.inf) - torch.log1p(-tau)
        floor = torch.as_tensor(score_floor, dtype=s_pos.dtype, device=s_pos.device)
        if stats is not None:
            stats["clamped_fraction"] = (log_g < floor).to(s_pos.dtype).mean().detach()
        log_g = torch.maximum(log_g, floor)
        return torch.logaddexp(s_pos, math.log(self.negative_weight) + log_g) - s_pos


@dataclass
class MINELoss(LossConfig):
    """MINE, the Donsker–Varadhan bound (eq. 86): −s_pos + log Σ_j e^{s_j} (no positive in the
    denominator; unbounded below for unnormalized dot products)."""

    name: str = "mine"

    def __call__(self, s_pos, s_neg, s_ppos=None, tau_plus=0.0, neg_logq=None,
                 score_floor=-math.inf):
        return -s_pos + _torch().logsumexp(s_neg, dim=1)


@dataclass
class SoftmaxLoss(MINELoss):
    """Full softmax (eq. 77): −s_pos + log Σ_{j∈I} e^{s_j}, MINE's formula with the denominator
    over every item (the positive and the user's other positives included)."""

    full_catalogue = True
    name: str = "softmax"


@dataclass
class MINEPlusLoss(LossConfig):
    """MINE+ (eq. 92): −s_pos + λ log Σ_j e^{s_j}, with s = cos/t (the temperature is the
    model's). λ = 1 at t = 1 is MINE."""

    cosine = True
    name: str = "mine_plus"
    negative_weight: float = param(1.2, gt=0, doc="λ; published 1.1 (Yelp2018, Amazon-Books), "
                                                  "1.2 (Gowalla)")

    def __call__(self, s_pos, s_neg, s_ppos=None, tau_plus=0.0, neg_logq=None,
                 score_floor=-math.inf):
        return -s_pos + self.negative_weight * _torch().logsumexp(s_neg, dim=1)


@dataclass
class InfoNCEPlusLoss(LossConfig):
    """InfoNCE+ [EXTENSION, arXiv 2312.08520, not in the dissertation; Li, Jin & Ren 2023]:
    −s_pos + log(ε e^{s_pos} + λ Σ_j e^{s_j}); ε = 1, λ = 1 is InfoNCE, ε = 0 is MINE+."""

    name: str = "infonce_plus"
    pos_weight: float = param(1.0, ge=0, doc="ε")
    negative_weight: float = param(1.0, gt=0, doc="λ")

    def __call__(self, s_pos, s_neg, s_ppos=None, tau_plus=0.0, neg_logq=None,
                 score_floor=-math.inf):
        torch = _torch()
        negatives = s_neg + math.log(self.negative_weight)
        if self.pos_weight == 0:
            return -s_pos + torch.logsumexp(negatives, dim=1)
        return -s_pos + torch.logsumexp(_cat_pos(s_pos + math.log(self.pos_weight), negatives),
                                        dim=1)


# --- pairwise (Li 2023, eqs. 87–91) ---------------------------------------------------------------


@dataclass
class BPRLoss(LossConfig):
    """BPR (eq. 89): Σ_j softplus(s_j − s_pos) (or the mean over j); N = 1 is classic BPR."""

    name: str = "bpr"
    reduction: str = param("sum", choices=REDUCTIONS, doc="over the N negatives")

    def __call__(self, s_pos, s_neg, s_ppos=None, tau_plus=0.0, neg_logq=None,
                 score_floor=-math.inf):
        return _reduce(_torch().nn.functional.softplus(s_neg - s_pos[:, None]), self.reduction)


@dataclass
class LinearPairwiseLoss(LossConfig):
    """The linear Jensen bound mean_j (s_j − s_pos) (Li 2023, eqs. 87–91): a diagnostic, reported to
    train poorly."""

    name: str = "linear_pairwise"

    def __call__(self, s_pos, s_neg, s_ppos=None, tau_plus=0.0, neg_logq=None,
                 score_floor=-math.inf):
        return (s_neg - s_pos[:, None]).mean(1)


# --- pointwise and their debiased forms (Li 2023, §4.3) -------------------------------------------


@dataclass
class _Pointwise(LossConfig):
    """l⁺(s_pos) + λ [red_j l⁻(s_j) − τ⁺ red_k l⁻(s_k)] (eq. 98); τ⁺ = 0 (the biased losses)
    drops the correction. `reduction` over the N negatives: mean (the equation), or sum (λ then
    weighs each negative: λ_sum · N = λ_mean gives identical losses; the correction term is
    scaled alike). clamp_neg_part_min keeps the bracket above a value (off by default, as the
    paper)."""

    negative_weight: float = param(1.0, ge=0, doc="λ")
    reduction: str = param("mean", choices=REDUCTIONS, doc="over the N negatives")
    clamp_neg_part_min: float | None = param(None, doc="null: no clamp (the paper)")

    def positive_term(self, s_pos):
        raise NotImplementedError

    def negative_term(self, s):
        raise NotImplementedError

    def _bracket(self, s_neg, s_ppos, tau_plus):
        bracket = _reduce(self.negative_term(s_neg), self.reduction)
        if self.positives:
            if s_ppos is None:
                raise ConfigError(f"{self.name} needs the sampled positives s_ppos")
            scale = 1.0 if self.reduction == "mean" else float(s_neg.shape[1])
            bracket = bracket - tau_plus * scale * self.negative_term(s_ppos).mean(1)
        if self.clamp_neg_part_min is not None:
            bracket = bracket.clamp(min=self.clamp_neg_part_min)
        return bracket

    def __call__(self, s_pos, s_neg, s_ppos=None, tau_plus=0.0, neg_logq=None,
                 score_floor=-math.inf):
        return self.positive_term(s_pos) + self.negative_weight * self._bracket(
            s_neg, s_ppos, tau_plus)


@dataclass
class MSELoss(_Pointwise):
    """MSE (eq. 93): (1 − s_pos)² + λ red_j s_j²."""

    name: str = "mse"

    def positive_term(self, s_pos):
        return (1.0 - s_pos) ** 2

    def negative_term(self, s):
        return s * s


@dataclass
class DebiasedMSELoss(MSELoss):
    """Debiased MSE (eq. 98): (1 − s_pos)² + λ [red_j s_j² − τ⁺ red_k s_k²]."""

    positives = True
    name: str = "debiased_mse"


@dataclass
class CCLLoss(_Pointwise):
    """Cosine contrastive loss (eq. 94, SimpleX): relu(1 − s_pos) + w red_j relu(s_j − ε),
    cosine scores, margin ε ∈ (−1, 1). SimpleX's Gowalla settings: ε = 0.9, w = 150, mean."""

    cosine = True
    name: str = "ccl"
    margin: float = param(0.9, gt=-1, lt=1, doc="ε")
    negative_weight: float = param(150.0, ge=0, doc="w (SimpleX: 150 with the mean)")

    def positive_term(self, s_pos):
        return _torch().relu(1.0 - s_pos)

    def negative_term(self, s):
        return (s - self.margin).relu_()  # in place on the difference: one (B, N) tensor


@dataclass
class DebiasedCCLLoss(CCLLoss):
    """Debiased CCL (eq. 98): relu(1 − s_pos) + λ [red_j relu(s_j − ε) − τ⁺ red_k relu(s_k − ε)].
    Defaults as CCL's (mean, the equation). Table 20 publishes λ = 0.7, ε = 0.9, M = 20 for
    Gowalla; that λ scale fits the sum over the N negatives (docs/concepts/losses.md), which the
    per-dataset presets use."""

    positives = True
    name: str = "debiased_ccl"


#: every loss config, by name (`loss=<name>`)
LOSS_CONFIGS: Registry[type[LossConfig]] = Registry.of_configs("loss.name", (
    SoftmaxLoss, SampledSoftmaxLoss, InfoNCELoss, DebiasedInfoNCELoss, MINELoss, MINEPlusLoss,
    InfoNCEPlusLoss, BPRLoss, LinearPairwiseLoss, MSELoss, DebiasedMSELoss, CCLLoss,
    DebiasedCCLLoss))


def loss_config(name: str, **params) -> LossConfig:
    """The checked config of loss `name` (ConfigError listing the known losses otherwise)."""
    return chosen_config({**params, "name": name}, LOSS_CONFIGS, "loss")

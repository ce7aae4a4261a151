"""The positive-class prior τ⁺_u of the debiased losses (MF) and of debiased iALS.

τ⁺_u is the share of user u's unlabelled items that are positives in truth (Chuang et al.,
NeurIPS'20; Li 2023, §4.2). Three forms, with |I_u| the user's training items and |I| the
catalogue:
- `ratio_alpha`: τ⁺_u = (1 + α)|I_u|/|I|, so that the confidence c_u = τ⁺_u|I|/|I_u| = 1 + α is
  one constant for every user;
- `count_k`: τ⁺_u = (|I_u| + K)/|I|, K extra positives beyond the observed ones;
- `fixed`: τ⁺_u = τ⁺ for every user.
Every form is clipped to [0, 1 − 1e-6], so that 1 − τ⁺ stays positive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from linrec.params import Params, param

PRIORS = ("ratio_alpha", "count_k", "fixed")
#: τ⁺ is clipped to [0, TAU_MAX] in every form
TAU_MAX = 1.0 - 1e-6

Counts = TypeVar("Counts")  # a numpy array or a torch tensor of floats


@dataclass
class PositivePriorConfig(Params):
    """The prior's fields, shared by the configs that use it (`model.sampling.*` of MF,
    `model.*` of debiased iALS)."""

    prior: str = param("ratio_alpha", choices=PRIORS, doc="ratio_alpha | count_k | fixed")
    prior_alpha: float = param(1.0, ge=0, doc="ratio_alpha: τ⁺_u = (1 + α)|I_u|/|I|")
    prior_k: int = param(20, ge=0, doc="count_k: τ⁺_u = (|I_u| + K)/|I|")
    tau_plus: float = param(1e-3, ge=0, lt=1, doc="fixed: τ⁺")

    def tau_plus_of(self, counts: Counts, n_items: int) -> Counts:
        """τ⁺_u of users with `counts` training items (float array or tensor, any shape),
        clipped to [0, TAU_MAX], in the type and precision of `counts`."""
        if self.prior == "count_k":
            tau = (counts + self.prior_k) / n_items
        elif self.prior == "ratio_alpha":
            tau = (1.0 + self.prior_alpha) * counts / n_items
        else:
            tau = counts * 0 + self.tau_plus
        return tau.clip(0.0, TAU_MAX)

"""A pairwise squared hinge for linrec's MF trainer."""

from dataclasses import dataclass

import torch

from linrec.models.losses import LossConfig
from linrec.params import param


@dataclass
class SquaredHingeLoss(LossConfig):
    """mean_j relu(margin − s_pos + s_j)² over the sampled negatives j."""

    name: str = "squared_hinge"
    margin: float = param(1.0, gt=0, doc="the margin")

    def __call__(self, s_pos, s_neg, s_ppos=None, tau_plus=0.0, neg_logq=None,
                 score_floor=float("-inf")):
        return torch.relu(self.margin - s_pos[:, None] + s_neg).pow(2).mean(1)

"""The MF-loss contract (`linrec.testing.check_loss`, public for plugins) over every registered
loss: (B,) values, finite values and gradients at extreme logits, one epoch of MF training."""

from __future__ import annotations

import pytest

from linrec.models.losses import LOSS_CONFIGS
from linrec.testing import check_loss


@pytest.mark.parametrize("name", sorted(LOSS_CONFIGS))
def test_the_loss_contract(name):
    check_loss(name)

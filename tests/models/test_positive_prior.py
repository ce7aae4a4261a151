"""The positive-class prior τ⁺: each form against the formula evaluated per user with Python
floats, the clip, and one definition shared by MF's sampler and debiased iALS."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from linrec.errors import ConfigError
from linrec.models.configs import DebiasedIALSConfig
from linrec.models.positive_prior import TAU_MAX, PositivePriorConfig
from linrec.models.samplers import SamplingConfig

COUNTS = [0.0, 1.0, 7.0, 30.0, 499.0]
N_ITEMS = 500


@pytest.mark.parametrize("fields, per_user", [
    ({"prior": "count_k", "prior_k": 20}, lambda c: (c + 20) / N_ITEMS),
    ({"prior": "ratio_alpha", "prior_alpha": 0.5}, lambda c: 1.5 * c / N_ITEMS),
    ({"prior": "fixed", "tau_plus": 0.25}, lambda c: 0.25),
])
def test_each_form_is_its_formula_clipped(fields, per_user):
    prior = PositivePriorConfig(**fields)
    want = [min(max(per_user(c), 0.0), TAU_MAX) for c in COUNTS]
    assert prior.tau_plus_of(np.array(COUNTS), N_ITEMS).tolist() == want
    got32 = prior.tau_plus_of(torch.tensor(COUNTS, dtype=torch.float32), N_ITEMS)
    assert got32.dtype == torch.float32
    np.testing.assert_allclose(got32.numpy(), want, rtol=2e-7)


def test_a_prior_above_one_is_clipped_below_one():
    tau = PositivePriorConfig(prior="count_k", prior_k=10).tau_plus_of(np.array([495.0]), 500)
    assert tau.tolist() == [TAU_MAX] and TAU_MAX < 1


def test_mf_and_debiased_ials_share_the_one_prior():
    fields = {"prior": "count_k", "prior_k": 3}
    for config in (SamplingConfig(**fields), DebiasedIALSConfig(**fields)):
        assert isinstance(config, PositivePriorConfig)
        assert config.tau_plus_of(np.array([2.0]), 10).tolist() == [0.5]
    assert {f: SamplingConfig.__dataclass_fields__[f].default for f in
            ("prior", "prior_alpha", "prior_k", "tau_plus")} == {
        f: DebiasedIALSConfig.__dataclass_fields__[f].default for f in
        ("prior", "prior_alpha", "prior_k", "tau_plus")}


@pytest.mark.parametrize("config", [SamplingConfig, DebiasedIALSConfig])
def test_tau_plus_must_be_below_one_in_both(config):
    with pytest.raises(ConfigError, match=r"tau_plus=1\.0 is out of range; allowed: a number "
                                          r">= 0 and < 1"):
        config(tau_plus=1.0)

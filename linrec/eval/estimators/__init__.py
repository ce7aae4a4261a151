"""Estimators that recover exact top-K metrics from sampled ranks (Li et al. 2020, §3; Li et al.
2023, §4), one module per family: `corrected` (Krichene–Rendle corrections: naive, unbiased rank,
LS, CLS), `bv`, `mn`, `em` (MLE, weighted MLE, MES), `adaptive` (adaptive MLE), `priors`, `mapping`
(the mapping functions of Li et al. 2020, §3) and `accuracy` (ARE, winner accuracy).
`registry.estimate` runs any of them by name."""

from linrec.eval.estimators.priors import pooled_prior
from linrec.eval.estimators.registry import (
    ESTIMATORS,
    EstimatorSpec,
    adaptive_estimators,
    estimate,
    estimate_repeats,
    fixed_size_estimators,
)
from linrec.eval.estimators.result import EstimateResult

__all__ = ["ESTIMATORS", "EstimateResult", "EstimatorSpec", "adaptive_estimators", "estimate",
           "estimate_repeats", "fixed_size_estimators", "pooled_prior"]

"""The input of one estimation call, shared by every estimator's runner: the validated sampled
ranks, their histogram and the (cached) P(r|R) operator."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from linrec.eval.conditional import conditional_operator
from linrec.eval.estimators._input import rank_histogram
from linrec.eval.estimators._linalg import ConditionalOp
from linrec.eval.estimators.result import EstimateResult


@dataclass
class EstimatorInput:
    """One estimation call: validated ranks, their histogram and the (cached) P(r|R) operator."""

    name: str
    ranks: np.ndarray
    n_items: int
    sample_size: int
    scheme: str

    @cached_property
    def histogram(self) -> np.ndarray:
        return rank_histogram(self.ranks, self.sample_size)

    @cached_property
    def cond(self) -> ConditionalOp:
        return conditional_operator(self.n_items, self.sample_size, self.scheme)

    @property
    def n_targets(self) -> int:
        return len(self.ranks)

    def result(self, p_hat: np.ndarray, **fields: Any) -> EstimateResult:
        return EstimateResult(
            name=self.name, p_hat=np.asarray(p_hat, dtype=np.float64), n_items=self.n_items,
            sample_size=self.sample_size, n_targets=self.n_targets, scheme=self.scheme, **fields,
        )

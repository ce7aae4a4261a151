"""Evaluation. `evaluate(model, split, config)` is the entry point (`evaluate`); underneath: global
ranks (`ranks`), exact metrics and curves (`metrics`), the one-pass exact evaluator (`exact`),
item sampling (`negatives`), the sampled-rank kernel and hook (`sampled_ranks`), rank simulation
and adaptive sampling (`simulate`), the sampled block (`sampled_block`), P(r|R)
(`conditional`), expected sampled metrics (`expected`), estimators of exact metrics
(`estimators`), user sampling and tests (`significance`); typed configs in `configs`, the
report in `report`."""

from linrec.eval.configs import AdaptiveConfig, EvalConfig, SampledConfig, ValidationConfig
from linrec.eval.evaluate import check_evaluation, evaluate, validation_score
from linrec.eval.exact import ExactResult, evaluate_exact
from linrec.eval.metrics import EXACT_METRICS, curve, exact_metrics, rank_gain
from linrec.eval.ranks import RankTable, global_ranks, tie_break_keys
from linrec.eval.report import EvalReport, SampledSetting, SplitReport

__all__ = [
    "EXACT_METRICS",
    "AdaptiveConfig",
    "EvalConfig",
    "ValidationConfig",
    "EvalReport",
    "ExactResult",
    "RankTable",
    "SampledConfig",
    "SampledSetting",
    "SplitReport",
    "check_evaluation",
    "curve",
    "evaluate",
    "evaluate_exact",
    "exact_metrics",
    "global_ranks",
    "rank_gain",
    "tie_break_keys",
    "validation_score",
]

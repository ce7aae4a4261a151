"""Evaluation: global ranks (`ranks`), exact metrics and curves (`metrics`), the one-pass evaluator
(`evaluator`), item sampling (`sampling`), P(r|R) (`conditional`), expected sampled metrics
(`expected`), estimators of exact metrics (`estimators`), user sampling and tests (`significance`),
and the run's sampled block (`sampled`)."""

from linrec.eval.evaluator import EvalResult, evaluate_split
from linrec.eval.metrics import EXACT_METRICS, curve, exact_metrics, rank_gain
from linrec.eval.ranks import RankTable, global_ranks, tie_break_keys

__all__ = [
    "EXACT_METRICS",
    "EvalResult",
    "RankTable",
    "curve",
    "evaluate_split",
    "exact_metrics",
    "global_ranks",
    "rank_gain",
    "tie_break_keys",
]

"""Evaluation. `evaluate(model, split, config)` is the entry point (`evaluate`); underneath: global
ranks (`ranks`), exact metrics and curves (`metrics`), the one-pass exact evaluator (`exact`),
item sampling (`negatives`), the sampled-rank kernel and hook (`sampled_ranks`), rank simulation
and adaptive sampling (`simulate`), the sampled block (`sampled_block`), P(r|R)
(`conditional`), expected sampled metrics (`expected`), estimators of exact metrics
(`estimators`), user sampling and tests (`significance`); typed configs in `configs`, the
report in `report`.

Its names are imported on first use (`linrec.lazy_exports`)."""

from linrec.lazy_exports import lazy_exports

__all__ = lazy_exports(__name__, {
    "linrec.eval.configs": ("AdaptiveConfig", "EvalConfig", "SampledConfig", "ValidationConfig"),
    "linrec.eval.evaluate": ("check_evaluation", "evaluate", "validation_score"),
    "linrec.eval.exact": ("ExactResult", "evaluate_exact"),
    "linrec.eval.metrics": ("EXACT_METRICS", "curve", "exact_metrics", "rank_gain"),
    "linrec.eval.ranks": ("RankTable", "global_ranks", "tie_break_keys"),
    "linrec.eval.report": ("EvalReport", "SampledSetting", "SplitReport"),
})

"""`evaluate(model, split, config, seed=...) -> EvalReport`: the one entry point of evaluation.

For every split the config names ('valid', 'test'), one batch pass scores the users, ranks every
held-out item and computes the exact metrics (`linrec.eval.exact`); the sampled block of the
split (`linrec.eval.sampled_block`) plugs its hooks into that pass and then estimates every
sampled setting. The run, the studies and any Python caller evaluate through here, so a number
means the same wherever it is printed.

`check_evaluation(split, config)` makes every check that needs only the data, for callers that
want to fail before a long fit; `validation_score` gives trainers their early-stopping metric.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from linrec.data.splits import EvalSet, Split
from linrec.errors import ConfigError
from linrec.eval.configs import EvalConfig
from linrec.eval.exact import evaluate_exact
from linrec.eval.metrics import resolve_selection
from linrec.eval.ranks import Scorer
from linrec.eval.report import EvalReport, SplitReport
from linrec.eval.sampled_block import SampledBlock


def _plan(split: Split, config: EvalConfig) -> dict[str, tuple[EvalSet, SampledBlock | None]]:
    """The splits to evaluate with their sampled blocks (checked against the data)."""
    evalsets = {name: getattr(split, name) for name in config.splits
                if getattr(split, name, None) is not None}
    if not evalsets:
        raise ConfigError(f"eval.splits={list(config.splits)}: the data has none of these "
                          "splits (a split without validation users has only 'test')")
    config.ks_for(split.n_items)
    sampled = config.sampled
    with_block = sampled.enabled and bool(sampled.settings())
    return {name: (evalset, SampledBlock(sampled, evalset, split.n_items,
                                         exclude_foldin=config.exclude_foldin)
                   if with_block else None)
            for name, evalset in evalsets.items()}


def check_evaluation(split: Split, config: EvalConfig) -> None:
    """Raise ConfigError now for anything `evaluate` would refuse on this split (K beyond the
    catalogue, sample sizes, pools, adaptive levels); no model needed."""
    _plan(split, config)


def evaluate(model: Scorer, split: Split, config: EvalConfig | None = None, *,
             seed: int = 0, users_known: bool | None = None, first_split: str | None = None,
             on_split: Callable[[EvalReport], None] | None = None) -> EvalReport:
    """Exact and sampled evaluation of a fitted `model` on every split `config.splits` names.

    seed: the tie-break seed of the ranking (docs/concepts/evaluation.md, ties; the run seed).
    Sampled sets are seeded by config.sampled.seed (the run seed unless overridden). users_known:
    score the evaluation users by their row id (default under weak generalization) or fold them in
    from their fold-in rows (default under strong generalization); a model trained with the
    evaluation users' fold-in rows knows them under either protocol.

    first_split: evaluate this split (when evaluated at all) before the others, and
    on_split(report) hears of every split as soon as it is done, with the report of the splits
    done so far: a run draws the figures of its test split while the validation split is scored
    (`linrec.experiment`). Each split's numbers are its own (the sampled blocks are seeded per
    split), so the order changes nothing in them; the returned report lists the splits in the
    config's order."""
    config = EvalConfig() if config is None else config
    t_start = time.perf_counter()
    plan = _plan(split, config)
    ks = config.ks_for(split.n_items)
    selection_metric = resolve_selection(config.selection, split.n_items)

    def report_of(reports: dict[str, SplitReport]) -> EvalReport:
        return EvalReport(splits=reports, selection_metric=selection_metric,
                          selection_split="valid" if "valid" in plan else "test",
                          seconds=time.perf_counter() - t_start)

    order = sorted(plan, key=lambda name: name != first_split)  # stable: the rest as planned
    reports: dict[str, SplitReport] = {}
    for name in order:
        evalset, block = plan[name]
        result = evaluate_exact(model, evalset, ks=ks, metrics=config.metrics, seed=seed,
                                users_known=(not split.strong if users_known is None
                                             else users_known),
                                batch_hooks=block.hooks() if block else (),
                                memory_budget_mb=config.memory_budget_mb,
                                exclude_foldin=config.exclude_foldin)
        reports[name] = SplitReport(
            name=name, n_users=int(evalset.n_users), exact=result.metrics,
            rank_table=result.rank_table, per_user=result.per_user,
            per_user_rows=result.per_user_rows, timings=result.timings,
            sampled=block.settings(result.rank_table) if block else {})
        if on_split is not None:
            on_split(report_of(dict(reports)))
    return report_of({name: reports[name] for name in plan})


def validation_score(split: Split, config: EvalConfig | None = None, *, seed: int = 0,
                     on: str = "valid") -> Callable[[Scorer], float] | None:
    """The early-stopping metric a trainer receives from the run: model -> the
    `config.selection` metric on the validation users (no sampled block), exact or, under
    eval.validation.method=sampled, estimated from sampled ranks (`SampledValidation`, whose
    `describe()` the run records); on="test" scores the test users instead (the published
    LightGCN/BARS protocol, which has no validation split). None when the split has no such
    users."""
    if on not in ("valid", "test"):
        raise ConfigError(f"validation_score: on={on!r}; allowed: valid, test")
    evalset = split.valid if on == "valid" else split.test
    if evalset is None:
        return None
    config = EvalConfig() if config is None else config
    key = resolve_selection(config.selection, split.n_items)
    ranked = "" if config.exclude_foldin else " fold-in ranked"  # keeps the old fingerprints
    if config.validation.method == "sampled":
        from linrec.eval.sampled_validation import SampledValidation

        how = config.validation
        sampled = SampledValidation(evalset, split.n_items, key=key, estimator=how.estimator,
                                    sample_size=how.sample_size, replace=how.replace, seed=seed,
                                    users_known=not split.strong,
                                    memory_budget_mb=config.memory_budget_mb,
                                    exclude_foldin=config.exclude_foldin, n_max=how.n_max)
        up_to = f" up to {sampled.levels[-1]}" if len(sampled.levels) > 1 else ""
        sampled.fingerprint = (f"{on} {key} seed={seed} sampled {how.estimator} "
                               f"n={how.sample_size}{up_to} {sampled.scheme}{ranked}")
        return sampled
    ks = config.ks_for(split.n_items)
    metric = key.partition("@")[0]

    def score(model: Scorer) -> float:
        result = evaluate_exact(model, evalset, ks=ks, metrics=[metric], seed=seed,
                                users_known=not split.strong,
                                memory_budget_mb=config.memory_budget_mb,
                                exclude_foldin=config.exclude_foldin)
        return float(result.metrics[key])

    #: what the score measures, for trainers that key checkpoints by it
    score.fingerprint = f"{on} {key} seed={seed}{ranked}"
    score.describe = lambda: {"method": "exact", "metric": key}
    return score

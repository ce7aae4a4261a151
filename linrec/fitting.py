"""The one model -> fit -> evaluate path of a run and of every study's runs, below both (so
that `experiment`, which dispatches to the studies, and the studies need not import each
other)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from linrec.errors import ConfigError
from linrec.trials import reporting

if TYPE_CHECKING:
    from linrec.config import RunConfig

log = logging.getLogger("linrec")


def fit_and_evaluate(config: RunConfig, model_config: Any, prepared: Any, *,
                     eval_config: Any = None, first_split: str | None = None,
                     on_split: Callable[[Any, Any], None] | None = None
                     ) -> tuple[Any, Any, dict[str, float]]:
    """Build the model of `model_config`, fit it on the prepared split (with the run's
    validation callback) and evaluate it: (model, EvalReport, timings). The one
    model -> fit -> evaluate path of the run and of the studies. first_split, on_split(model,
    report so far): as in `linrec.eval.evaluate`, with the fitted model."""
    from linrec.eval import check_evaluation, evaluate, validation_score
    from linrec.models import build_model

    eval_config = config.eval if eval_config is None else eval_config
    split = prepared.split
    check_evaluation(split, eval_config)  # everything that needs only the data, before the fit
    model = build_model(model_config)
    if split.strong and not model.supports_strong_generalization:
        raise ConfigError(f"model {model_config.name!r} cannot score users it was not trained "
                          "on, which strong generalization (data.split.kind=strong) needs; use "
                          "a split that keeps the evaluation users in training")
    select_on = getattr(model_config, "select_on", "valid")
    if "select_on" in model_config.names() and getattr(split, select_on) is None:
        raise ConfigError(f"model.select_on={select_on}: the data has no "
                          "validation split; take one from the training rows "
                          "(data.split.valid_fraction=0.1) or select on the test users "
                          "(model.select_on=test, the published protocol)")
    t0 = time.perf_counter()
    validation = validation_score(split, eval_config, seed=config.seed, on=select_on)
    model.fit(split.train, reporting(validation))  # reporting: to an Optuna trial, if any
    timings = {"fit": time.perf_counter() - t0}
    log.info("fit %s in %.2fs", model_config.name, timings["fit"])
    report = evaluate(model, split, eval_config, seed=config.seed, first_split=first_split,
                      on_split=None if on_split is None else partial(on_split, model))
    timings["evaluate"] = report.seconds
    return model, report, timings


def training_record(model: Any) -> dict[str, Any] | None:
    """The model's training log for results.json, with the split its epochs were selected on
    and what measured them (a trained model only)."""
    log_ = model.training_log()
    if log_ is None:
        return None
    record = {**log_, "selected_on": getattr(model, "select_on", "valid")}
    if getattr(model, "validated_by_", None) is not None:
        record["validation"] = model.validated_by_
    return record

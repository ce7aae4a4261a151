"""run(cfg, run_dir): data -> model -> fit -> evaluate -> results.json; returns the validation
selection metric (for sweepers). A config with a `study` runs that study instead
(`linrec.studies`), whose runs go through the same `linrec.fitting` path."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from linrec.config import run_config
from linrec.figure_process import FigureProcess
from linrec.figure_record import figure_split
from linrec.fitting import fit_and_evaluate, training_record
from linrec.plugins import load_plugins
from linrec.results import jsonable, print_run, run_record, source_revision, write_run

log = logging.getLogger("linrec")


def run(cfg: Any, run_dir: str | Path, overrides: Sequence[str] = (), *,
        in_sweep: bool = False) -> float | None:
    """Execute one configured run (cfg: a Hydra DictConfig, a mapping or a RunConfig) and write
    its run directory. Returns the validation value of `eval.selection` (test if the data has
    no validation split). A sweep's job (`in_sweep`) prints one line, not the summary."""
    from linrec.data.pipeline import prepare_data

    source_revision()  # the source this run starts from, for its record (read once a process)
    specs = cfg.get("plugins") if isinstance(cfg, Mapping) else getattr(cfg, "plugins", None)
    load_plugins(specs or ())  # what the config names must be registered before it is read
    config = run_config(cfg)
    if config.study is not None:
        from linrec.studies import run_study

        return run_study(config, Path(run_dir))
    with FigureProcess(config.figures) as figures:  # matplotlib loads during the fit
        t0 = time.perf_counter()
        prepared = prepare_data(config.data)
        data_seconds = time.perf_counter() - t0

        def figures_ahead(model: Any, done: Any) -> None:
            """The figure split is scored first: its figures are drawn while the rest is."""
            if len(done.splits) == 1:
                figures.send(jsonable({**done.to_json(), "training": training_record(model)}),
                             run_dir)

        model, report, timings = fit_and_evaluate(
            config, config.model, prepared, first_split=figure_split(config.eval.splits),
            on_split=figures_ahead if config.figures else None)
        if report.selection_split == "test":
            log.warning("no validation split: the returned selection metric (%s) is a test "
                        "metric; do not tune hyper-parameters on it", report.selection_metric)
        record = run_record(dataset={"name": prepared.name, **prepared.stats},
                            model=config.model.name, report=report,
                            timings={"data": data_seconds, **timings},
                            config=config.to_dict(), seed=config.seed, overrides=overrides,
                            training=training_record(model))
        path = write_run(run_dir, record, report, save_ranks=config.save_ranks,
                         per_user=config.eval.save_per_user, figures=config.figures,
                         draw_figures=figures.draw,
                         model=model if config.save_model else None,
                         user_ids=prepared.split.user_ids)
    print_run(record, path, quiet=config.quiet, verbose=config.verbose, in_sweep=in_sweep)
    return report.selection_value

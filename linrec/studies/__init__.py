"""Studies: multi-model protocols behind `experiment=<name>` presets. A study is a list of runs
(each written like any run, under <run dir>/runs/) plus the tables and figures it derives from
them (<run dir>/tables, figures) and a study.json index; `linrec-report` reads all of it.

`run_study(config, run_dir)` (`linrec.studies.registry`) dispatches on `config.study.name`."""

from linrec.studies.registry import STUDIES, run_study

__all__ = ["STUDIES", "run_study"]

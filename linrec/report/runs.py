"""Every run below some directories as one tidy table (pandas): complete runs with their
configuration, selection and metrics; failed and half-written runs listed, not dropped.

One row per run directory:
- `run`, `status` (complete | failed | pruned | incomplete), `error` (why it is not complete);
- `dataset` (its name) and `data_key` (the dataset and split protocol: runs with different keys
  are never compared in one table), `model` (the model's name, with its loss for a model
  trained with one: `mf/ccl`), `config_key` (the model's settings without seed and machine
  fields: one key per configuration), `seed`, `study` and `label` for a study's runs;
- `param.<field>` for every model field (nested fields dotted: `param.loss.margin`);
- `selection_metric`, `selection_split`, `selection_value`;
- `<metric>@<K>` of the reported split (exact metrics), `fit_s`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from linrec.errors import DataError
from linrec.results import FAILED_FILE, RESULTS_FILE, STUDY_FILE, run_files
from linrec.trials import PRUNED_FILE

#: model fields that do not define a configuration (machine, bookkeeping, randomness)
NOT_CONFIGURATION = ("seed", "num_threads", "checkpoint_dir", "resume", "device")
#: data fields that do not change the data (where it is cached, whether it may be downloaded)
NOT_DATA = ("cache", "cache_dir", "download")


@dataclass(frozen=True)
class Runs:
    """The table of runs (`frame`) and the directories that were searched."""

    frame: Any  # pandas.DataFrame
    dirs: tuple[Path, ...]

    @property
    def complete(self) -> Any:
        return self.frame[self.frame["status"] == "complete"]

    @property
    def not_complete(self) -> Any:
        return self.frame[self.frame["status"] != "complete"]


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}", inner, out)
    else:
        out[prefix] = json.dumps(value) if isinstance(value, list) else value


def _key(value: Any) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:12]


def model_label(model_config: Mapping[str, Any], name: str | None) -> str:
    """The model's name, with its loss's for a model trained with one (`mf/ccl`)."""
    label = str(name or model_config.get("name"))
    loss = model_config.get("loss")
    return f"{label}/{loss['name']}" if isinstance(loss, Mapping) and loss.get("name") else label


def data_key(record: Mapping[str, Any]) -> str:
    """The dataset and split protocol a run was evaluated on."""
    data = dict((record.get("config") or {}).get("data") or {})
    for field in NOT_DATA:
        data.pop(field, None)
    return f"{(record.get('dataset') or {}).get('name')}:{_key(data)}"


def run_row(record: Mapping[str, Any], run_dir: Path, split: str) -> dict[str, Any]:
    """The table row of one complete run."""
    config = record.get("config") or {}
    model_config = dict(config.get("model") or {})
    configuration = {k: v for k, v in model_config.items() if k not in NOT_CONFIGURATION}
    selection = record.get("selection") or {}
    study = record.get("study") or {}
    row: dict[str, Any] = {
        "run": str(run_dir), "status": "complete", "error": None,
        "dataset": (record.get("dataset") or {}).get("name"), "data_key": data_key(record),
        "model": model_label(model_config, record.get("model")),
        "config_key": _key(configuration), "seed": config.get("seed", record.get("seed")),
        "study": study.get("name"), "label": study.get("label"),
        "selection_metric": selection.get("metric"), "selection_split": selection.get("split"),
        "selection_value": selection.get("value"),
        "split": split if split in (record.get("splits") or {}) else None,
        "fit_s": (record.get("timings") or {}).get("fit"),
    }
    for field, value in configuration.items():
        if field != "name":
            _flatten(f"param.{field}", value, row)
    exact = ((record.get("splits") or {}).get(split) or {}).get("exact") or {}
    row.update(exact)
    return row


def _not_complete_row(run_dir: Path, status: str, error: str | None) -> dict[str, Any]:
    overrides = run_dir / ".hydra" / "overrides.yaml"
    label = None
    if overrides.is_file():
        label = " ".join(line.lstrip("- ").strip() for line in overrides.read_text().splitlines()
                         if line.strip())
    return {"run": str(run_dir), "status": status, "error": error, "label": label}


def _is_run_dir(path: Path) -> bool:
    """A Hydra job directory (its .hydra/ record), not a sweep's root."""
    return (path / ".hydra").is_dir() and not (path / "multirun.yaml").exists()


def read_runs(dirs: Iterable[str | Path], split: str = "test") -> Runs:
    """Every run (results.json) below `dirs`, the runs of studies included, and every failed
    (FAILED marker) or half-written (a job directory without results) run. DataError when a
    directory does not exist or holds nothing linrec wrote."""
    import pandas as pd

    dirs = tuple(Path(d).absolute() for d in dirs)  # run paths in the table are absolute
    rows: list[dict[str, Any]] = []
    seen: set[Path] = set()
    for d in dirs:
        if not d.exists():
            raise DataError(f"{d}: no such directory")
        results = [d] if d.is_file() else run_files(d, RESULTS_FILE)
        for path in results:
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                rows.append(_not_complete_row(path.parent, "incomplete",
                                              f"unreadable results.json ({exc})"))
                seen.add(path.parent)
                continue
            rows.append(run_row(record, path.parent, split))
            seen.add(path.parent)
        if d.is_dir():
            for marker in run_files(d, FAILED_FILE):
                if marker.parent not in seen:
                    rows.append(_not_complete_row(marker.parent, "failed",
                                                  marker.read_text().strip()))
                    seen.add(marker.parent)
            for marker in run_files(d, PRUNED_FILE):
                if marker.parent not in seen:
                    rows.append(_not_complete_row(marker.parent, "pruned",
                                                  marker.read_text().strip()))
                    seen.add(marker.parent)
            for hydra_dir in run_files(d, ".hydra"):
                job = hydra_dir.parent
                if job not in seen and _is_run_dir(job) and not (job / STUDY_FILE).exists():
                    rows.append(_not_complete_row(job, "incomplete", "no results.json: "
                                                  "interrupted or still running"))
                    seen.add(job)
    if not rows:
        raise DataError(f"no runs below {', '.join(map(str, dirs))}: no results.json, FAILED "
                        "marker or job directory (.hydra/) found")
    frame = pd.DataFrame(rows)
    for column in ("dataset", "data_key", "model", "config_key", "seed", "selection_value",
                   "selection_split", "selection_metric", "study", "label"):
        if column not in frame:
            frame[column] = None
    return Runs(frame=frame, dirs=dirs)


def metric_columns(frame: Any) -> list[str]:
    """The exact-metric columns present (metric@K and auc), in the order of first appearance."""
    return [c for c in frame.columns if ("@" in c and not c.startswith("param.")) or c == "auc"]


def varying_params(frame: Any, by_model: bool = False) -> list[str]:
    """param.* columns whose value differs between the rows (the swept settings); by_model:
    those that differ between the runs of some one model (the union over models)."""
    if by_model:
        out: list[str] = []
        for _, group in frame.groupby("model", sort=True):
            out += [p for p in varying_params(group) if p not in out]
        return out
    out = []
    for column in (c for c in frame.columns if c.startswith("param.")):
        # a setting missing in some runs varies too (pandas' own str would keep it missing)
        values = frame[column].map(lambda v: "<missing>" if _missing(v) else repr(v))
        if frame[column].notna().any() and values.nunique() > 1:
            out.append(column)
    return out


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)

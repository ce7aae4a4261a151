"""Run records: the small committed file that every reported number comes from.

A record (`experiments/records/<group>/<name>.json`) is written from a run directory by
`python experiments/record.py RUN_DIR --as <group>/<name>`. It holds what the tables need and
nothing heavy (no ranks, no model): the command that regenerates the run, its resolved config,
the dataset's sizes, the exact metrics of every evaluated split, the selection, the training log
(per-epoch curve, best epoch, stop reason) of a model trained by epochs, the timings, and the
environment (CPU, threads, linrec's commit, library versions). `python experiments/build.py`
turns the records into the tables of experiments/README.md.

A comparison record (`python experiments/record.py compare RUN_A RUN_B --as <name>`) holds the
paired test of two runs over their users (from their per-user metrics), which a record of one run
cannot give.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
RECORDS = ROOT / "records"
#: the record format's version
FORMAT = 1
#: machine paths of the data -> the path the documentation names
DEFAULT_ALIASES = {"/work/shared/data/gowalla": "/data/gowalla"}
#: the libraries whose versions a record keeps
LIBRARIES = ("numpy", "scipy", "torch", "implicit", "numba", "scikit-learn", "hydra-core")


def command_of(overrides: Iterable[str], aliases: Mapping[str, str], program: str = "linrec"
               ) -> str:
    """The command line of a run from its overrides, machine paths replaced by `aliases`."""
    words = []
    for override in overrides:
        for old, new in aliases.items():
            override = override.replace(old, new)
        words.append(override)
    return " ".join([program, *(shlex.quote(w) for w in words)])


def record_of_run(run_dir: Path, name: str, aliases: Mapping[str, str] = DEFAULT_ALIASES,
                  cpu: str | None = None) -> dict[str, Any]:
    """The record of the run in `run_dir` (its results.json), named `name`. `cpu` names the
    processor for a results.json written before linrec recorded it."""
    results = json.loads((run_dir / "results.json").read_text())
    environment = results["environment"]
    splits = {split: {"exact": block["exact"], "n_users": block.get("n_users")}
              for split, block in results["splits"].items()}
    record: dict[str, Any] = {
        "format": FORMAT,
        "name": name,
        "command": results.get("command") or command_of(
            results.get("overrides", []), aliases,
            "linrec-evaluate" if "run_file" in (results["config"].get("model") or {}) else
            "linrec"),
        "model": results["model"],
        "dataset": results["dataset"],
        "seed": results.get("seed"),
        "config": _aliased(results["config"], aliases),
        "selection": results.get("selection"),
        "splits": splits,
        "timings": results.get("timings", {}),
        "environment": {
            "cpu": environment.get("cpu") or cpu or "unknown",
            "cpu_cores": environment.get("cpu_cores"),
            "threads": environment.get("linrec_threads"),
            "linrec": environment.get("linrec"),
            "created": environment.get("created"),
            "python": environment.get("python"),
            "libraries": {k: v for k, v in environment.get("libraries", {}).items()
                          if k in LIBRARIES},
        },
    }
    if results.get("study"):
        record["study"] = results["study"]
    if results.get("training"):
        training = results["training"]
        record["training"] = {k: training.get(k) for k in (
            "best_epoch", "stop_reason", "resumed_from", "selected_on")}
        record["training"]["epochs"] = training.get("epochs", [])
    if results.get("notes"):
        record["notes"] = results["notes"]
    return record


def _aliased(value: Any, aliases: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for old, new in aliases.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, Mapping):
        return {k: _aliased(v, aliases) for k, v in value.items()}
    if isinstance(value, list):
        return [_aliased(v, aliases) for v in value]
    return value


def write_record(record: Mapping[str, Any], root: Path = RECORDS) -> Path:
    """records/<name>.json (indented, keys in order, one trailing newline)."""
    path = root / f"{record['name']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    return path


def load_records(root: Path = RECORDS) -> dict[str, dict[str, Any]]:
    """Every record below `root` by its name (the path below root without .json); a file
    whose `name` differs from its path is an error (a copied record must be renamed)."""
    records = {}
    for path in sorted(root.rglob("*.json")):
        name = path.relative_to(root).with_suffix("").as_posix()
        record = json.loads(path.read_text())
        if record.get("name") != name:
            raise ValueError(f"{path}: its name is {record.get('name')!r}, its path says "
                             f"{name!r}")
        records[name] = record
    return records


def under(records: Mapping[str, dict[str, Any]], group: str) -> dict[str, dict[str, Any]]:
    """The records whose name starts with `group/`."""
    prefix = group.rstrip("/") + "/"
    return {name: r for name, r in records.items() if name.startswith(prefix)}

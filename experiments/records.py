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
#: where the documentation puts data files: a record names a run's data path /data/<its name>,
#: whatever directory the machine that ran it held it in
DATA_ROOT = "/data"
#: the libraries whose versions a record keeps
LIBRARIES = ("numpy", "scipy", "torch", "implicit", "numba", "scikit-learn", "hydra-core")


def documented_path(path: str) -> str:
    """An absolute data path as the documentation names it: /data/<its last part>."""
    if not path.startswith("/") or path.startswith(DATA_ROOT + "/"):
        return path
    return f"{DATA_ROOT}/{Path(path).name}"


def command_of(overrides: Iterable[str], program: str = "linrec") -> str:
    """The command line of a run from its overrides, data paths as the documentation names
    them (`documented_path`)."""
    words = []
    for override in overrides:
        key, eq, value = override.partition("=")
        if eq and key.rsplit(".", 1)[-1] == "path":
            override = f"{key}={documented_path(value)}"
        words.append(override)
    return " ".join([program, *(shlex.quote(w) for w in words)])


def record_of_run(run_dir: Path, name: str, cpu: str | None = None) -> dict[str, Any]:
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
            results.get("overrides", []),
            "linrec-evaluate" if "run_file" in (results["config"].get("model") or {}) else
            "linrec"),
        "model": results["model"],
        "dataset": results["dataset"],
        "seed": results.get("seed"),
        "config": _documented(results["config"]),
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


def _documented(value: Any, key: str = "") -> Any:
    """A config with its data paths (fields named `path`) as the documentation names them."""
    if isinstance(value, str):
        return documented_path(value) if key == "path" else value
    if isinstance(value, Mapping):
        return {k: _documented(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_documented(v) for v in value]
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

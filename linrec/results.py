"""Run records: build and write a run directory (results.json, ranks, model, figures)
atomically, read them back, and the small tables of a run and a study (linrec-report, which
reads many runs, is linrec.report)."""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import re
import socket
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from linrec.atomic import atomic_open, write_text_atomic
from linrec.console import cell, text_table
from linrec.errors import DataError
from linrec.plugins import loaded_plugins

RESULTS_FILE = "results.json"
FAILED_FILE = "FAILED"
RANKS_FILE = "ranks.npz"
#: a split's per-user metrics (eval.save_per_user)
PER_USER_FILE = "per_user_{split}.parquet"
STUDY_FILE = "study.json"
#: where the outputs of a complete earlier run go when a new run starts in its directory
#: (linrec.sweeps.clear_outputs); readers of runs never look below it
SUPERSEDED_DIR = "superseded"


def run_files(root: str | Path, name: str) -> list[Path]:
    """Every file or directory called `name` below `root`, sorted, except those set aside
    under a SUPERSEDED_DIR (the results of an earlier run that a newer one replaced)."""
    root = Path(root)
    return sorted(p for p in root.rglob(name)
                  if SUPERSEDED_DIR not in p.relative_to(root).parts[:-1])


def jsonable(obj: Any) -> Any:
    """numpy scalars/arrays and paths -> plain JSON types; NaN/inf -> None (JSON has no NaN)."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Path):
        return str(obj)
    return obj


def write_json_atomic(path: str | Path, record: Mapping[str, Any]) -> Path:
    """Write `record` as indented JSON to `path` atomically (temp file + rename)."""
    return write_text_atomic(path, json.dumps(jsonable(record), indent=2) + "\n")


def mark_failed(run_dir: str | Path, message: str) -> None:
    """Leave a FAILED marker (with the error) in a run directory that has no complete results;
    a results.json of an earlier run into the same directory is removed (linrec-report would
    otherwise list it as this run's result)."""
    run_dir = Path(run_dir)
    (run_dir / RESULTS_FILE).unlink(missing_ok=True)
    write_text_atomic(run_dir / FAILED_FILE, message.rstrip() + "\n")


#: recorded whether imported or not: torch is a hard dependency whose build matters (CPU/CUDA)
_ALWAYS_RECORDED = ("numpy", "scipy", "torch")
#: installers and linrec itself (recorded apart) are not libraries of the run
_NOT_LIBRARIES = frozenset({"linrec", "pip", "setuptools", "wheel"})


def _header(text: str, field: str) -> str | None:
    """The value of a core-metadata header field (the first `field:` line before the body)."""
    prefix = field.lower() + ":"
    for line in text.splitlines():
        if not line.strip():
            return None
        if line.lower().startswith(prefix):
            return line[len(prefix):].strip()
    return None


def _top_level(dist: Any) -> list[str]:
    """The top-level modules `dist` provides, as importlib.metadata.packages_distributions
    finds them: its top_level.txt, else the first part of each .py path of its RECORD."""
    declared = (dist.read_text("top_level.txt") or "").split()
    if declared:
        return declared
    found = []
    for line in (dist.read_text("RECORD") or "").splitlines():
        path = line.split(",", 1)[0].strip('"')
        if path.endswith(".py"):
            found.append(path.split("/", 1)[0] if "/" in path else path[:-3])
    return list(dict.fromkeys(found))


@functools.lru_cache(maxsize=1)
def _installed() -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """(top-level module -> the installed distributions that provide it, normalised
    distribution name -> version), read once per process in one pass over the distributions'
    metadata files: the mapping of importlib.metadata.packages_distributions and the versions of
    importlib.metadata.version (the first distribution of a name on sys.path), without their
    parsing of every METADATA file as an e-mail and of every RECORD path (0.25 s of a run)."""
    from importlib.metadata import distributions

    modules: dict[str, list[str]] = {}
    versions: dict[str, str] = {}
    for dist in distributions():
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
        name, dist_version = _header(text, "Name"), _header(text, "Version")
        if name is None:
            continue
        if dist_version is not None:
            versions.setdefault(_canonical_name(name), dist_version)
        for module in _top_level(dist):
            modules.setdefault(module, []).append(name)
    return {m: tuple(dict.fromkeys(names)) for m, names in modules.items()}, versions


def _module_distributions() -> dict[str, tuple[str, ...]]:
    """Top-level module -> the installed distributions that provide it (`_installed`)."""
    return _installed()[0]


def _canonical_name(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _normalized(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def imported_distributions(modules: Iterable[str] | None = None) -> list[str]:
    """The installed distributions (sorted, as their metadata names them) that provide the
    modules imported so far (`sys.modules`, or `modules`), without linrec and installers. A
    namespace package that several distributions share (hydra_plugins) counts only the
    distributions whose name is an imported sub-package of it."""
    by_module = _module_distributions()
    names = list(sys.modules) if modules is None else list(modules)
    found: set[str] = set()
    for module in names:
        top, _, rest = module.partition(".")
        dists = by_module.get(top, ())
        if len(dists) > 1:  # namespace package: match the sub-package to the distribution
            sub = _normalized(rest.partition(".")[0])
            dists = tuple(d for d in dists if _normalized(d) == sub)
        found.update(d for d in dists if _normalized(d) not in _NOT_LIBRARIES)
    return sorted(found, key=str.lower)


def _distribution_version(name: str) -> str | None:
    """The installed version of a distribution (None: not installed)."""
    return _installed()[1].get(_canonical_name(name))


def _library_versions() -> dict[str, str]:
    """Version of every distribution the run imported, and of numpy, scipy and torch."""
    versions = {name: _distribution_version(name)
                for name in (*_ALWAYS_RECORDED, *imported_distributions())}
    return dict(sorted(((k, v) for k, v in versions.items() if v is not None),
                       key=lambda item: item[0].lower()))


def _installed_commit() -> str | None:
    """The commit an install from a git URL came from (`pip install git+URL` records it in the
    distribution's direct_url.json, PEP 610); None for other installs."""
    import json
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        text = distribution("linrec").read_text("direct_url.json")
        commit = json.loads(text).get("vcs_info", {}).get("commit_id") if text else None
    except (PackageNotFoundError, ValueError, AttributeError):
        return None
    return commit if isinstance(commit, str) else None


def source_revision() -> dict[str, Any]:
    """linrec's version, and the git commit of its source: of the checkout (with a dirty flag)
    when linrec runs from one, else the commit a git-URL install recorded. Read once a process,
    at its first call: a run asks when it starts (`experiment.run`), so a run during which the
    checkout moved on records the source it was started from, whose modules it had loaded."""
    return dict(_read_source_revision())


@functools.cache
def _read_source_revision() -> dict[str, Any]:
    import subprocess

    from linrec import __version__

    info: dict[str, Any] = {"version": __version__}
    root = Path(__file__).resolve().parents[1]
    if (root / ".git").exists():
        try:
            git = ["git", "-C", str(root)]
            commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                                    timeout=10, check=True).stdout.strip()
            dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10,
                                   check=True).stdout.strip()
            info.update(commit=commit, dirty=bool(dirty))
        except (OSError, subprocess.SubprocessError):
            pass
    else:
        commit = _installed_commit()
        if commit:
            info["commit"] = commit
    return info


#: the libraries `linrec --version` names: those whose versions move linrec's numbers or configs
VERSION_LIBRARIES = ("numpy", "scipy", "torch", "implicit", "numba", "hydra-core", "omegaconf")


def version_text() -> str:
    """What `linrec --version` prints: linrec's version and commit, Python's and the versions of
    VERSION_LIBRARIES (one per line)."""
    revision = source_revision()
    if "commit" not in revision:
        commit = "commit unknown (installed without version-control information)"
    else:
        commit = f"commit {revision['commit']}"
        if revision.get("dirty"):
            commit += " with uncommitted changes"
    lines = [f"linrec {revision['version']}, {commit}", f"python {platform.python_version()}"]
    lines += [f"{name} {_distribution_version(name) or 'not installed'}"
              for name in VERSION_LIBRARIES]
    return "\n".join(lines)


def environment_info() -> dict[str, Any]:
    """Provenance of this process for results.json: linrec's version and source commit, the
    versions of the libraries, thread settings, host and time."""
    from datetime import datetime, timezone

    from linrec.hardware import cpu_cores, cpu_model, thread_limit

    info: dict[str, Any] = {
        "linrec": source_revision(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "libraries": _library_versions(),
        "cpu": cpu_model(),
        "cpu_cores": cpu_cores(),
        "linrec_threads": thread_limit(),
        "env_threads": {
            k: os.environ[k]
            for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
            if k in os.environ
        },
    }
    try:
        from threadpoolctl import threadpool_info

        info["blas_threads"] = [
            {"api": p.get("internal_api"), "threads": p.get("num_threads")}
            for p in threadpool_info()
        ]
    except Exception:  # threadpoolctl is optional information only
        pass
    if "torch" in sys.modules:  # torch's thread count only when the run used it
        info["torch_threads"] = sys.modules["torch"].get_num_threads()
    if plugins := loaded_plugins():
        info["plugins"] = [p.to_dict() for p in plugins]
    return info


def run_record(*, dataset: Mapping[str, Any], model: str, report: Any,
               timings: Mapping[str, float], config: Mapping[str, Any], seed: int,
               overrides: Iterable[str] = (), study: Mapping[str, Any] | None = None,
               training: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The results.json record of one run: dataset, model, the EvalReport's splits and
    selection, timings, provenance, seed, overrides and the resolved config; `study` (name,
    label, grid point) for a run that is part of a study; `training` (per-epoch loss, learning
    rate, validation metric, seconds, the split epochs were selected on) for a trained model."""
    record: dict[str, Any] = {"dataset": dict(dataset), "model": model, **report.to_json(),
                              "timings": dict(timings), "environment": environment_info(),
                              "seed": seed, "overrides": list(overrides),
                              "config": dict(config)}
    if study is not None:
        record["study"] = dict(study)
    if training is not None:
        record["training"] = dict(training)
    return record


def write_run(run_dir: str | Path, record: Mapping[str, Any], report: Any, *,
              save_ranks: bool = True, per_user: bool = False, model: Any = None,
              figures: bool = True, draw_figures: Callable[..., list[Path]] | None = None,
              user_ids: np.ndarray | None = None) -> Path:
    """Write a run directory: ranks.npz (and ranks_<split>.npz), per_user_<split>.parquet when
    `per_user`, model.pkl when `model` is given, the run's figures (`draw_figures(record,
    run_dir)`, by default `plots.run_figures`; `figure_process.FigureProcess.draw`), then
    results.json last, so that a complete results.json means a complete run; an earlier FAILED
    marker is removed."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for split_name, split in report.splits.items():
        if save_ranks:
            name = RANKS_FILE if split_name == "test" else f"ranks_{split_name}.npz"
            split.rank_table.save_npz(run_dir / name)
        if per_user:
            write_per_user(run_dir / PER_USER_FILE.format(split=split_name), split, user_ids)
    if model is not None:
        model.save(run_dir / "model.pkl")
    if figures:
        if draw_figures is None:
            from linrec.plots import run_figures as draw_figures
        draw_figures(jsonable(record), run_dir)
    path = write_json_atomic(run_dir / RESULTS_FILE, record)
    (run_dir / FAILED_FILE).unlink(missing_ok=True)
    return path


def write_per_user(path: str | Path, split: Any, user_ids: np.ndarray | None = None) -> None:
    """A split's per-user exact metrics as Parquet, a row per user and metric: user (int64, the
    row id of the split's user vocabulary, as in ranks.npz), user_id (the dataset's own id of
    that user, when `user_ids` (the split's vocabulary) is given: integers as int64, anything
    else as a string), metric (string, "ndcg@20", "auc"), value (float64); users ascending,
    metrics in the results' order. The mean of `value` over a metric's rows is that metric in
    results.json."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = list(split.per_user)
    users = split.per_user_users()
    values = np.column_stack([split.per_user[k] for k in keys]) if keys else np.empty((0, 0))
    columns: dict[str, Any] = {"user": np.repeat(users, len(keys)).astype(np.int64)}
    if user_ids is not None:
        ids = np.repeat(np.asarray(user_ids)[users], len(keys))
        columns["user_id"] = ids.astype(np.int64) if ids.dtype.kind in "iu" else \
            pa.array(ids.astype(str), pa.string())
    columns["metric"] = pa.array(np.tile(np.array(keys, dtype=object), len(users)), pa.string())
    columns["value"] = values.ravel().astype(np.float64)
    table = pa.table(columns)
    with atomic_open(path, "wb") as fh:
        pq.write_table(table, fh)


def read_results(path: str | Path) -> dict[str, Any]:
    """Read one results.json (DataError naming the file when it is not valid JSON)."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not a valid results file ({exc})") from exc


def find_studies(dirs: Iterable[str | Path]) -> list[Path]:
    """Every study.json below the given directories, sorted."""
    return sorted(p for d in map(Path, dirs) if d.is_dir() for p in run_files(d, STUDY_FILE))


def _metric_grid(
    exact: Mapping[str, Any],
) -> tuple[list[str], list[int], dict[tuple[str, int], Any]]:
    """{'ndcg@10': v, 'auc': v} -> metric names, sorted K (0 for no K), {(name, K): value}."""
    names: list[str] = []
    ks: set[int] = set()
    cells: dict[tuple[str, int], Any] = {}
    for key, value in exact.items():
        name, _, k = key.partition("@")
        if name not in names:
            names.append(name)
        kk = int(k) if k else 0
        ks.add(kk)
        cells[(name, kk)] = value
    return names, sorted(ks), cells


def _headline(record: Mapping[str, Any]) -> list[str]:
    ds = record.get("dataset", {})
    held = ", ".join(f"{split} {ds[f'{split}_targets']:,}"
                     for split in ("valid", "test") if f"{split}_targets" in ds)
    timings = record.get("timings", {})
    return [f"linrec: {record.get('model')} on {ds.get('name')}: {ds.get('n_users', 0):,} users "
            f"x {ds.get('n_items', 0):,} items, {ds.get('n_interactions', 0):,} interactions "
            f"(train {ds.get('n_train_interactions', 0):,}; held out: {held})",
            f"fit {timings.get('fit', 0):.2f} s, evaluate {timings.get('evaluate', 0):.2f} s"]


def _estimate(sampled: Mapping[str, Any], estimator: str, key: str) -> Any:
    entry = sampled["estimators"][estimator]["metrics"].get(key)
    if entry is None:
        return None
    return "diverged" if entry.get("status") == "diverged" else entry.get("mean")


def best_estimator(sampled: Mapping[str, Any]) -> str | None:
    """The estimator (not the naive metric) with the lowest mean ARE over the curve metrics of
    a sampled setting of results.json; None when none has a finite one."""
    scored = []
    for name, entry in sampled.get("estimators", {}).items():
        values = [v.get("mean") for v in entry.get("are", {}).values()]
        if name != "naive" and values and all(v is not None for v in values):
            scored.append((sum(values) / len(values), name))
    return min(scored)[1] if scored else None


def format_job_line(record: Mapping[str, Any], path: str | Path) -> str:
    """One line for a sweep's job: its selection value, its test value of the same metric and
    where its results.json is."""
    selection = record.get("selection") or {}
    metric, value = selection.get("metric"), selection.get("value")
    test = record.get("splits", {}).get("test", {}).get("exact", {}).get(metric)
    parts = [f"{selection.get('split')} {metric} {cell(value)}"]
    if selection.get("split") != "test" and test is not None:
        parts.append(f"test {metric} {cell(test)}")
    return f"linrec: {record.get('model')}: {', '.join(parts)}; results: {path}"


def format_run_summary(record: Mapping[str, Any], path: str | Path | None = None) -> str:
    """What a run prints by default (about 20 lines): what ran, the test split's exact metrics
    at K = 10, 20 and the selection's K, the naive sampled metric and the best estimator beside
    the exact target-level value at 20, how training ended, and where results.json is."""
    lines = _headline(record)
    splits = record.get("splits", {})
    split = "test" if "test" in splits else next(iter(splits), None)
    selection = record.get("selection") or {}
    if split is not None:
        names, ks, cells = _metric_grid(splits[split].get("exact", {}))
        _, _, selection_k = str(selection.get("metric", "")).partition("@")
        shown = [k for k in ks if k in (10, 20) or (selection_k and k == int(selection_k))]
        rows = [[name, *(cell(cells.get((name, k))) for k in shown)] for name in names
                if any((name, k) in cells for k in shown)]
        value = selection.get("value")
        lines += ["", *text_table([f"{split}, exact", *(f"K={k}" for k in shown)], rows)]
        extra = [f"{name} {cell(cells[(name, 0)])}" for name in names if (name, 0) in cells]
        if value is not None:
            extra.append(f"selection: {selection['metric']} on {selection['split']} = "
                         f"{cell(value)}")
        if extra:
            lines.append("; ".join(extra))
        for label, sampled in (splits[split].get("sampled") or {}).items():
            best = best_estimator(sampled)
            k = min(20, int(sampled.get("protocol", {}).get("k_max", 20)))
            keys = [key for key in sampled.get("exact", {}) if key.endswith(f"@{k}")]
            estimators = [e for e in ("naive", best) if e in sampled.get("estimators", {})]
            if not keys or not estimators:
                continue
            rows = [[key, cell(sampled["exact"][key]),
                     *(cell(_estimate(sampled, e, key)) for e in estimators)] for key in keys]
            header = [f"{split}, sampled {label}", "exact per target"] + \
                [e if e == "naive" else f"{e} (best ARE)" for e in estimators]
            lines += ["", *text_table(header, rows)]
        training = record.get("training")
        if training:
            lines += ["", training_line(training)]
    lines += ["", f"results: {path}" if path else "",
              "full tables: verbose=true; many runs: linrec-report <dir>"]
    return "\n".join(line for line in lines if line is not None).rstrip() + "\n"


def training_line(training: Mapping[str, Any]) -> str:
    """'training: stopped early after epoch 12 of 100 (...); kept epoch 9, valid recall@20
    0.2136' from the training block of results.json."""
    epochs = training.get("epochs") or []
    last = epochs[-1]["epoch"] if epochs else 0
    reason = {"epochs": "ran every epoch", "early_stopping": "stopped early",
              "min_lr": "stopped at the learning rate's floor"}.get(
        training.get("stop_reason"), f"stopped ({training.get('stop_reason')})")
    metric = (training.get("validation") or {}).get("metric", "")
    kept = training.get("best_epoch")
    value = next((e.get(training.get("selected_on", "valid")) for e in epochs
                  if e.get("epoch") == kept), None)
    shown = f", {training.get('selected_on', 'valid')} {metric} {value:.4f}" \
        if isinstance(value, float) else ""
    resumed = f", resumed from epoch {training['resumed_from']}" \
        if training.get("resumed_from") else ""
    return (f"training: {reason} after epoch {last}{resumed}; kept epoch {kept}{shown}")


def print_run(record: Mapping[str, Any], path: str | Path, *, quiet: bool = False,
              verbose: bool = False, in_sweep: bool = False) -> None:
    """What a finished run prints: the summary (`format_run_summary`), the full tables
    (`verbose`), one line for a sweep's job (the sweep ends with a table of its jobs) or,
    `quiet`, only where results.json is."""
    if quiet:
        print(f"results: {path}")
    elif in_sweep and not verbose:
        print(format_job_line(record, path))
    elif verbose:
        print(format_run_table(record))
        print(f"results: {path}")
    else:
        print(format_run_summary(record, path), end="")


def format_run_table(record: Mapping[str, Any]) -> str:
    """The run's full tables (`verbose=true`): exact metric x K per split, then per sampled
    setting the exact target-level values beside every estimator's mean and their ARE."""
    lines = _headline(record)
    for split_name, block in record.get("splits", {}).items():
        names, ks, cells = _metric_grid(block.get("exact", {}))
        rows = [[name, *(cell(cells.get((name, k))) if (name, k) in cells else "" for k in ks)]
                for name in names]
        lines += ["", *text_table([f"{split_name}, exact", *(f"K={k}" if k else "" for k in ks)],
                                  rows)]
        for label, sampled in (block.get("sampled") or {}).items():
            lines += ["", *_format_sampled(split_name, label, sampled)]
    if record.get("training"):
        lines += ["", training_line(record["training"])]
    return "\n".join(lines)


def _format_sampled(split_name: str, label: str, sampled: Mapping[str, Any]) -> list[str]:
    proto = sampled.get("protocol", {})
    estimators = list(sampled.get("estimators", {}))
    head = (f"{split_name}, sampled {label} ({proto.get('method')}), {proto.get('repeats')} "
            f"repeats, target-level metrics, mean over repeats; ARE = average relative error "
            f"over K = 1..{proto.get('k_max')}, %")
    rows = [[key, cell(exact), *(cell(_estimate(sampled, e, key)) for e in estimators)]
            for key, exact in sampled.get("exact", {}).items()]
    for metric in proto.get("metrics", []):
        are = [sampled["estimators"][e]["are"].get(metric, {}) for e in estimators]
        rows.append([f"ARE {metric}", "",
                     *("diverged" if a.get("status") == "diverged" else cell(a.get("mean"), 1)
                       for a in are)])
    return [head, *text_table(["", "exact", *estimators], rows)]

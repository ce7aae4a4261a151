"""Sweeps that resume and never hide a failure.

- Directories: a sweep lives in `multirun/<name of its command>` (its overrides, sorted, not
  the clock) and each job in `<the job's values of the swept keys>`, so the same `linrec -m …`
  finds its jobs again. Launcher and sweeper settings (`hydra…`) and `resume` do not change a
  job's results and are left out of both names: a sweep started with the basic launcher
  resumes under joblib.
- Resume: a job whose directory holds a complete results.json of the same config is skipped
  (its recorded selection value is returned to the sweeper); any other job starts by clearing
  what an earlier attempt left (results, ranks, model, figures, FAILED), so a directory never
  mixes two runs: a failed attempt's outputs are removed, a complete run's (another config's,
  or any with `resume=false`) are moved to `superseded/<time>/`, which readers of runs skip.
  `resume=false` re-runs every job.
- Signals: SIGTERM (how SLURM ends a job at its time limit) and SIGINT mark the job FAILED and
  stop (linrec.interrupts); a SIGKILL leaves no results.json, so the job is re-run next time.
- Failures: any error in a job marks it FAILED (a linrec error with its message, any other with
  its traceback) and the sweep goes on; after the sweep, every job that failed during it, and
  every job it started that left no results (a worker killed outright: out of memory, SIGKILL),
  is listed and the command exits 2 (a signal: 128 + its number), whichever launcher ran the
  jobs.
- Threads: parallel jobs (joblib) share the cores: each job's BLAS, torch and linrec thread
  counts are cores // n_jobs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from linrec.results import FAILED_FILE, RESULTS_FILE, STUDY_FILE, SUPERSEDED_DIR
from linrec.trials import PRUNED_FILE

log = logging.getLogger("linrec")

#: where sweeps live (relative to the working directory), as Hydra's default
SWEEP_ROOT = "multirun"
#: files and directories a run or study writes; cleared before a job runs again
RUN_OUTPUTS = (RESULTS_FILE, STUDY_FILE, FAILED_FILE, "ranks.npz", "ranks_valid.npz",
               "model.pkl")
STUDY_OUTPUTS = ("runs", "tables", "figures")
#: patterns of the other files a run writes: its figures (linrec.plots.run_figures), its
#: per-user metrics (eval.save_per_user) and the top-K lists of linrec-recommend
RUN_PATTERNS = ("sampled_*.png", "sampled_*.pdf", "estimator_error_*.png",
                "estimator_error_*.pdf", "training_curve.png", "training_curve.pdf",
                "recommendations_*.tsv", "per_user_*.parquet")
_MAX_NAME = 96
_UNSAFE = re.compile(r"[^A-Za-z0-9=,.+_@-]+")


def _ignored(override: str) -> bool:
    """Overrides that do not change a job's results: hydra's own and resume."""
    key = override.lstrip("+~").split("=", 1)[0]
    return key.startswith(("hydra.", "hydra/")) or key in ("hydra", "resume")


def _readable(text: str, digest_of: str) -> str:
    """`text` made safe for a directory name; shortened, with a hash of `digest_of` appended,
    when it is long or had to be changed."""
    safe = _UNSAFE.sub("_", text)
    if safe == text and len(safe) <= _MAX_NAME:
        return safe
    digest = hashlib.sha1(digest_of.encode()).hexdigest()[:10]
    return f"{safe[:_MAX_NAME - 11]}-{digest}"


def sweep_name(overrides: Sequence[str]) -> str:
    """The directory name of a sweep under `multirun/`: its results-relevant overrides, sorted
    (the order on the command line does not matter); `default` without any."""
    keep = sorted(str(o) for o in overrides if not _ignored(str(o)))
    if not keep:
        return "default"
    return _readable("__".join(keep), "\n".join(keep))


def job_name(override_dirname: str) -> str:
    """The directory name of a sweep job: Hydra's `override_dirname` of the job (`default` for
    a job without overrides)."""
    return _readable(override_dirname, override_dirname) if override_dirname else "default"


def register_resolvers() -> None:
    """`${linrec_job:${hydra.job.override_dirname}}` for conf/config.yaml (idempotent)."""
    from linrec.hydra_compat import register_resolver

    register_resolver("linrec_job", lambda name: job_name(str(name)))


def sweep_overrides(overrides: Sequence[str]) -> list[str]:
    """The overrides `linrec -m` adds to a command line (none when it sets them itself):
    `hydra.sweep.dir=multirun/<sweep_name>`, and the command's fixed (non-sweep) keys added to
    override_dirname's exclude_keys, so that a job's directory names only what varies."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    keys = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
    added = []
    if "hydra.sweep.dir" not in keys:
        added.append(f"hydra.sweep.dir='{SWEEP_ROOT}/{sweep_name(overrides)}'")
    if "hydra.job.config.override_dirname.exclude_keys" not in keys:
        try:
            parsed = OverridesParser.create().parse_overrides(list(overrides))
        except Exception:  # noqa: BLE001 - a syntax error: Hydra reports it
            return added
        fixed = sorted({p.get_key_element().lstrip("+~") for p in parsed
                        if not p.is_sweep_override() and not _ignored(p.input_line)})
        exclude = ",".join(["resume", *fixed])
        added.append(f"hydra.job.config.override_dirname.exclude_keys=[{exclude}]")
    return added


# ---------------------------------------------------------------------------------------------
# resume


def complete_result(run_dir: Path, config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The results.json (a study: study.json) record in run_dir when it is complete and was
    written by `config` (the run's plain config dict); None when the job must run (missing,
    unreadable, failed, or written by another config: then the reason is logged)."""
    path = _finished_record(run_dir)
    if path is None:
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        log.warning("%s: unreadable %s; running the job again", run_dir, path.name)
        return None
    if _comparable(record.get("config")) != _comparable(config):
        log.warning("%s: its %s was written by another config (a changed default or preset); "
                    "running the job again", run_dir, path.name)
        return None
    return record


def _finished_record(run_dir: Path) -> Path | None:
    """The record of a run that finished in run_dir (results.json, or a study's study.json,
    written after all its runs), None when there is none or a FAILED marker is there."""
    for path in (run_dir / RESULTS_FILE, run_dir / STUDY_FILE):
        if path.is_file():
            return None if (run_dir / FAILED_FILE).exists() else path
    return None


def _plain_json(value: Any) -> Any:
    from linrec.results import jsonable

    return json.loads(json.dumps(jsonable(value), sort_keys=True))


#: settings that change how a run is shown, logged or resumed, never its numbers
_NOT_RESULTS = ("resume", "tracking", "quiet", "verbose", "plugins")


def _comparable(config: Any) -> Any:
    """A run's config without what does not make its results another config's: its resume
    switches (the run's and its model's), its tracking, what it prints, and the plugins it
    named (a plugin's model is in the model block)."""
    plain = _plain_json(config)
    if isinstance(plain, dict):
        for key in _NOT_RESULTS:
            plain.pop(key, None)
        if isinstance(plain.get("model"), dict):
            plain["model"].pop("resume", None)
    return plain


def clear_outputs(run_dir: Path) -> Path | None:
    """Clear a job's directory of what an earlier run left (RUN_OUTPUTS, RUN_PATTERNS and a
    study's STUDY_OUTPUTS; Hydra's own .hydra/ and the log stay), so that it never mixes two
    runs. A failed or half-written attempt's outputs are removed; a complete earlier run's
    (results.json or study.json, no FAILED) are moved to `superseded/<UTC time>/` and that
    directory is returned: a new run that fails or is stopped loses nothing that finished."""
    import shutil
    import time

    names = [name for name in (*RUN_OUTPUTS, *STUDY_OUTPUTS) if (run_dir / name).exists()]
    names += [path.name for pattern in RUN_PATTERNS for path in sorted(run_dir.glob(pattern))]
    if _finished_record(run_dir) is not None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside = run_dir / SUPERSEDED_DIR / stamp
        suffix = 1
        while aside.exists():  # two runs into one directory within a second
            aside, suffix = run_dir / SUPERSEDED_DIR / f"{stamp}-{suffix}", suffix + 1
        aside.mkdir(parents=True)
        for name in names:
            (run_dir / name).rename(aside / name)
        # the documented behaviour of a rerun into one directory, nothing lost: the run's log
        # says where the older outputs went, the terminal stays quiet
        log.info("%s: held a complete earlier run; its outputs are kept in %s", run_dir, aside)
        return aside
    for name in names:
        path = run_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    return None


def recorded_selection(record: Mapping[str, Any]) -> float | None:
    """The selection value a complete run returned (what the sweeper optimises)."""
    selection = record.get("selection") or {}
    value = selection.get("value")
    return None if value is None else float(value)


#: the override lists of the jobs the running sweep planned (linrec's basic sweeper notes them)
PLANNED_JOBS: list[list[str]] = []


class SweepCallback(Callback):
    """A Hydra callback (conf/config.yaml `hydra.callbacks`) that notes, in the process that
    runs the sweep, where the sweep lives and when it started: `unfinished_jobs_of_last_sweep`
    reads them after Hydra returns, whichever launcher ran the jobs."""

    last: dict[str, Any] = {}

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        import time

        SweepCallback.last = {"dir": Path(str(config.hydra.sweep.dir)), "started": time.time()}


def unfinished_jobs_of_last_sweep() -> list[tuple[Path, str]]:
    """`unfinished_jobs` of the sweep this process ran last (empty after a single run)."""
    last = SweepCallback.last
    return unfinished_jobs(last["dir"], last["started"]) if last else []


#: a started job without results and without a FAILED marker: its process died outright
NO_RESULTS = ("no results: its process was killed (out of memory, SIGKILL) or the sweep stopped "
              "before it ended")


def _jobs(sweep_dir: Path) -> Iterator[tuple[Path, float, bool]]:
    """(job directory, when it started, whether it left an outcome: results.json, study.json,
    FAILED or PRUNED) of every job below sweep_dir, i.e. every directory Hydra wrote .hydra/
    into."""
    for overrides in sorted(sweep_dir.rglob(".hydra/overrides.yaml")):
        job = overrides.parent.parent
        outcome = any((job / name).exists()
                      for name in (RESULTS_FILE, STUDY_FILE, FAILED_FILE, PRUNED_FILE))
        yield job, overrides.stat().st_mtime, outcome


def unfinished_jobs(sweep_dir: Path, since: float) -> list[tuple[Path, str]]:
    """(job directory, why) of every job of the sweep that started at `since` (a time.time()
    value) that failed or left no results, sorted: a FAILED marker written since then (why: its
    first line), or a job started since then without any outcome (why: NO_RESULTS)."""
    if not sweep_dir.is_dir():
        return []
    since -= 1.0  # file times may be coarser than time.time()
    out: dict[Path, str] = {}
    for marker in sweep_dir.rglob(FAILED_FILE):
        if marker.stat().st_mtime >= since:
            lines = marker.read_text(errors="replace").strip().splitlines()
            out[marker.parent] = lines[0] if lines else "failed"
    for job, started, outcome in _jobs(sweep_dir):
        if started >= since and not outcome:
            out[job] = NO_RESULTS
    return sorted(out.items())


def sweep_table(sweep_dir: Path, since: float | None = None) -> list[str]:
    """The lines that end a sweep: one row per job of `sweep_dir` with the values the jobs
    differ in, its selection value (the best marked) and its test value of the same metric;
    the jobs that failed or left no results (since `since`, when given) below it."""
    import yaml

    from linrec.console import cell, text_table

    jobs = []
    for job, _, _ in _jobs(sweep_dir):
        overrides = yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text()) or []
        values = dict(o.split("=", 1) for o in overrides if "=" in o)
        record = None
        if (job / RESULTS_FILE).is_file():
            try:
                record = json.loads((job / RESULTS_FILE).read_text())
            except (OSError, ValueError):
                record = None
        jobs.append((job, values, record))
    if not jobs:
        return []
    keys = [k for k in dict.fromkeys(k for _, v, _ in jobs for k in v)
            if len({v.get(k) for _, v, _ in jobs}) > 1 and not _ignored(f"{k}=")]
    complete = [(j, v, r) for j, v, r in jobs if r is not None]
    metric = next(((r.get("selection") or {}).get("metric") for _, _, r in complete), None)
    split = next(((r.get("selection") or {}).get("split") for _, _, r in complete), "valid")
    values = [recorded_selection(r) for _, _, r in complete]
    best = max((v for v in values if v is not None), default=None)
    def order(job: tuple[Path, dict[str, str], Any]) -> tuple:
        return tuple(_sortable(job[1].get(k, "")) for k in keys) or (job[0].name,)

    rows = []
    for job, overrides, record in sorted(jobs, key=order):
        if record is None:
            continue
        value = recorded_selection(record)
        test = (record.get("splits", {}).get("test", {}).get("exact", {})).get(metric)
        labels = [overrides.get(k, "") for k in keys] if keys else [job.name]
        rows.append([*labels, cell(value),
                     "◀ best" if value is not None and value == best else "",
                     cell(test) if split != "test" else ""])
    header = [*(keys or ["job"]), f"{split} {metric}", "", f"test {metric}"
              if split != "test" else ""]
    pruned = sum((job / PRUNED_FILE).exists() for job, _, _ in jobs)
    lines = [f"sweep {sweep_dir}: {len(complete)} of {len(jobs)} job(s) complete"
             + (f", {pruned} pruned" if pruned else "")]
    if rows:
        lines += text_table(header, rows, left=len(keys or ["job"]))
    unfinished = unfinished_jobs(sweep_dir, since) if since is not None else [
        (j, NO_RESULTS) for j, _, r in jobs
        if r is None and not (j / FAILED_FILE).exists() and not (j / PRUNED_FILE).exists()]
    return lines if not unfinished else [*lines, f"{len(unfinished)} job(s) without results "
                                         "(listed below)"]


def _sortable(text: str) -> tuple[int, float | str]:
    """Numbers in numeric order before text in text order."""
    try:
        return (0, float(text))
    except ValueError:
        return (1, text)


def stop_sweep(sweep_dir: Path, since: float, reason: str) -> tuple[list[Path], list[str]]:
    """A sweep stopped by a signal: every job it started that left no outcome is marked FAILED
    (`reason`; the same command runs it again), and the planned jobs it never started are
    named. Returns (the marked job directories, the jobs not started as their overrides)."""
    from linrec.atomic import write_text_atomic

    marked, started = [], set()
    for job, when, outcome in _jobs(sweep_dir):
        started.add(job)
        if when >= since - 1.0 and not outcome:
            write_text_atomic(job / FAILED_FILE, reason.rstrip() + "\n")
            marked.append(job)
    started_overrides = {_overrides_key(job) for job in started}
    varying = {o.split("=", 1)[0] for job in PLANNED_JOBS for o in job
               if sum(o in other for other in PLANNED_JOBS) < len(PLANNED_JOBS)}
    not_started = [" ".join(o for o in job if o.split("=", 1)[0] in varying) or " ".join(job)
                   for job in PLANNED_JOBS if tuple(sorted(job)) not in started_overrides]
    return marked, not_started


def _overrides_key(job: Path) -> tuple[str, ...]:
    import yaml

    return tuple(sorted(yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text()) or []))


def mark_abandoned(sweep_dir: Path, reason: str) -> list[Path]:
    """Write a FAILED marker (`reason`) into every job directory below sweep_dir that an earlier
    command started and left without any outcome (its process was killed), for a sweeper that
    never runs such a job again (Optuna proposes new points). The marker keeps the job's start
    time, so it counts as that earlier sweep's failure, not this one's. Returns the marked
    directories."""
    from linrec.atomic import write_text_atomic

    marked = []
    for job, started, outcome in _jobs(sweep_dir):
        if not outcome:
            write_text_atomic(job / FAILED_FILE, reason.rstrip() + "\n")
            os.utime(job / FAILED_FILE, (started, started))
            marked.append(job)
    return marked


# ---------------------------------------------------------------------------------------------
# threads of parallel jobs


def parallel_jobs(hydra_cfg: Any) -> int:
    """How many jobs the launcher runs at once (1 unless it is joblib's with n_jobs)."""
    launcher = hydra_cfg.launcher
    target = str(launcher.get("_target_", ""))
    if "joblib" not in target.lower():
        return 1
    from linrec.hardware import cpu_cores

    n_jobs = int(launcher.get("n_jobs", -1) or -1)
    return cpu_cores() if n_jobs < 0 else max(1, n_jobs)


@contextlib.contextmanager
def thread_budget(n_jobs: int) -> Iterator[int | None]:
    """Within: linrec (hence torch in MF) and BLAS use cores // n_jobs threads; nothing is
    capped for n_jobs 1. Yields the budget (None when nothing is capped)."""
    from threadpoolctl import threadpool_limits

    from linrec.hardware import THREADS_ENV, cpu_cores

    if n_jobs <= 1:
        yield None
        return
    budget = max(1, cpu_cores() // n_jobs)
    previous = os.environ.get(THREADS_ENV)
    os.environ[THREADS_ENV] = str(budget)
    try:
        with threadpool_limits(limits=budget):
            yield budget
    finally:
        if previous is None:
            os.environ.pop(THREADS_ENV, None)
        else:
            os.environ[THREADS_ENV] = previous

"""Command-line entry points: `linrec` (a Hydra run or multirun) and `linrec-report` (aggregate)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from linrec.errors import LinrecError

log = logging.getLogger("linrec")
DEFAULT_REPORT_METRICS = "recall@20,recall@50,ndcg@20,ndcg@100,recall_trunc@20,auc"


def config_dir() -> str:
    """The Hydra config directory: $LINREC_CONF, else the repository's conf/ beside the package."""
    env = os.environ.get("LINREC_CONF")
    path = Path(env) if env else Path(__file__).resolve().parents[1] / "conf"
    if not (path / "config.yaml").is_file():
        sys.exit(f"linrec: error: no config.yaml in {path}; set LINREC_CONF to the conf/ directory")
    return str(path)


#: run directories of the jobs of this process's sweep that failed with a LinrecError
_failed_jobs: list[str] = []


def _task(cfg) -> float | None:
    """One Hydra job: run the experiment; a LinrecError becomes a one-line message and exit 2
    (in a sweep: a FAILED marker, the message, and the next job; `main` exits 2 at the end)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from linrec.experiment import run
    from linrec.results import mark_failed

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        return run(cfg, run_dir=run_dir, overrides=list(hydra_cfg.overrides.task))
    except LinrecError as exc:
        mark_failed(run_dir, f"{type(exc).__name__}: {exc}")
        print(f"linrec: error: {exc}", file=sys.stderr)
        if hydra_cfg.mode != RunMode.MULTIRUN:
            sys.exit(2)
        _failed_jobs.append(str(run_dir))
        return None
    except Exception as exc:  # an internal error: keep its traceback, still mark the run
        mark_failed(run_dir, f"{type(exc).__name__}: {exc}")
        raise


def main() -> None:
    """`linrec [overrides...]`: see README.md."""
    import hydra

    hydra.main(version_base="1.3", config_path=config_dir(), config_name="config")(_task)()
    if _failed_jobs:
        print(f"linrec: error: {len(_failed_jobs)} sweep job(s) failed (FAILED marker in "
              f"{', '.join(_failed_jobs)})", file=sys.stderr)
        sys.exit(2)


def report_main(argv: list[str] | None = None) -> int:
    """`linrec-report DIR... [--split test] [--out DIR]`: one CSV + Markdown table of all runs."""
    from linrec.atomic import write_text_atomic
    from linrec.results import collect, to_csv, to_markdown

    parser = argparse.ArgumentParser(
        prog="linrec-report", description="Collect every results.json below DIRs into one table."
    )
    parser.add_argument("dirs", nargs="+", help="run or sweep directories")
    parser.add_argument("--split", default="test", help="split whose exact metrics are shown")
    parser.add_argument("--out", default=None, help="directory for report.csv/.md (default: DIR)")
    parser.add_argument(
        "--metrics", default=DEFAULT_REPORT_METRICS,
        help="comma-separated metric@K columns of the Markdown table (the CSV keeps all); "
             f"default {DEFAULT_REPORT_METRICS}")
    args = parser.parse_args(argv)
    try:
        columns, rows = collect(args.dirs, split=args.split)
    except LinrecError as exc:
        print(f"linrec-report: error: {exc}", file=sys.stderr)
        return 2
    if not rows:
        where = ", ".join(args.dirs)
        print(f"linrec-report: error: no results.json below {where}", file=sys.stderr)
        return 2
    keep = set(args.metrics.split(","))
    md_columns = [c for c in columns if ("@" not in c and c != "auc") or c in keep]
    first = Path(args.dirs[0])
    out = Path(args.out) if args.out else (first.parent if first.is_file() else first)
    write_text_atomic(out / "report.csv", to_csv(columns, rows))
    md = to_markdown(md_columns, rows)
    write_text_atomic(out / "report.md", md)
    print(md, end="")
    print(f"wrote {out / 'report.csv'} and {out / 'report.md'} ({len(rows)} runs)")
    return 0

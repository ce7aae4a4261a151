"""The `linrec-report` command line (linrec.cli.report_main turns a LinrecError into one line)."""

from __future__ import annotations

from linrec.report.build import DEFAULT_BASELINE, DEFAULT_METRICS, build_report
from linrec.report.compare import BOOTSTRAP_RESAMPLES


def main(argv: list[str] | None = None) -> int:
    """`linrec-report DIR... [--split test|valid] [--out DIR] [--metrics m@K,...]
    [--baseline 'MODEL [setting=value ...]'] [--alpha 0.05] [--bootstrap 1000]
    [--published 'MODEL SETTING=X METRIC@K=Y' ...] [--no-figures]`."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="linrec-report",
        description="Every run (results.json) and study (study.json) below DIRs: per dataset, "
                    "the best configuration per model on validation with significance tests "
                    "against a baseline, every run, figures, and the runs without results.")
    parser.add_argument("dirs", nargs="+", help="run, sweep or study directories")
    parser.add_argument("--split", default="test", help="split whose metrics are shown "
                        "(test or valid); each split writes its own files")
    parser.add_argument("--out", default=None, help="output directory (default: the first DIR)")
    parser.add_argument("--metrics", default=None,
                        help=f"comma-separated metric@K columns (default: those of "
                             f"{','.join(DEFAULT_METRICS)} that were computed)")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE,
                        help=f"what the others are tested against: a model (default "
                             f"{DEFAULT_BASELINE}; with a loss: mf/ccl), its best configuration, "
                             "or one configuration of it: 'ease lam=100'")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level")
    parser.add_argument("--bootstrap", type=int, default=BOOTSTRAP_RESAMPLES,
                        help="resamples of the bootstrap interval of each model's difference "
                             "from the baseline (over users, at confidence 1 - alpha); 0: none")
    parser.add_argument("--published", action="append", default=[],
                        metavar="'MODEL SETTING=X METRIC@K=Y ...'",
                        help="a published value to mark (a star) on the figures of a metric "
                             "against a swept setting, e.g. "
                             "'mf/mine_plus temperature=0.4 recall@20=0.1813'; repeatable")
    parser.add_argument("--no-figures", action="store_true", help="tables only")
    args = parser.parse_args(argv)
    metrics = [m.strip() for m in args.metrics.split(",")] if args.metrics else None
    report = build_report(args.dirs, split=args.split, out=args.out, metrics=metrics,
                          baseline=args.baseline, alpha=args.alpha, figures=not args.no_figures,
                          bootstrap=args.bootstrap, published=args.published)
    print(report.markdown, end="")
    print(f"wrote {len(report.files)} files to {report.files[-1].parent} ({report.n_runs} runs"
          + (f", {report.n_problems} without results" if report.n_problems else "") + ")")
    return 0

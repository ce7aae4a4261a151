"""`linrec-report`: every run and study below some directories, as tables a researcher can hand
in (runs.py reads, compare.py chooses and tests, figures.py draws, studies.py collects the
studies' tables and figures, render.py writes the formats, build.py puts it together, cli.py is
the command line).

Per dataset (runs on different datasets or split protocols are never mixed in one table):
- every run: its swept settings, seed, validation selection value and the reported split's
  metrics;
- the comparison: per model the configuration best on validation, the reported split's metrics
  as mean ± std over seeds, the best value per column in bold, and tests against the
  baseline (paired t `*` and Wilcoxon `†` over users, Welch t `‡` over seeds, Holm-corrected);
- the differences: per model its mean per-user difference from the baseline with a percentile
  bootstrap interval over the shared users (at confidence 1 − alpha);
- figures (linrec.report.figures): the metric against K of each model's chosen configuration,
  heat maps of two-setting grids, training curves, and the sampled-estimator figures (metric
  and relative error against K, sampled-rank histogram) of each chosen configuration;
- failed and half-written runs, listed with their errors.
Written to <out>/report_<split>.{md,csv,html}, comparison_<split>.{md,csv,tex} and
significance_<split>.csv (every Holm-adjusted p-value), effects_<split>.csv (every difference
with its interval), figures in <out>/figures/ (PNG and PDF, every name ending in the split).
Every study found is appended with its own tables (Markdown; HTML tables; LaTeX in
ablations_<split>.tex) and figures. The tidy CSV has one row per run directory.
"""

from linrec.report.build import DEFAULT_BASELINE, DEFAULT_METRICS, ReportFiles, build_report
from linrec.report.cli import main

__all__ = ["DEFAULT_BASELINE", "DEFAULT_METRICS", "ReportFiles", "build_report", "main"]

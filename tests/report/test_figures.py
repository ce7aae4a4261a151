"""linrec.report.figures and the figures runs and studies write, opened from the files: every
kind the report draws (metric vs K, grid heat map, training curve, each model's sampled metric
and estimator curves, their relative error, the sampled-rank histogram) and copies (a study's
heat maps and spectral profile), and every kind a run writes, as PNG (size, drawn pixels) and
PDF (header, trailer, size); the HTML page embeds every PNG."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from matplotlib.image import imread


def assert_drawn_png(path: Path) -> None:
    """A PNG of a real figure: a few hundred pixels each way, not one colour, with ink."""
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    pixels = imread(path)
    assert pixels.shape[0] >= 200 and pixels.shape[1] >= 300, (path, pixels.shape)
    gray = pixels[..., :3].mean(axis=2)
    assert gray.std() > 0.04, path  # not blank
    assert (gray < 0.5).mean() > 0.003, path  # dark ink: axes, labels, lines
    assert (gray > 0.9).mean() > 0.2, path  # a white background around it


def assert_pdf(path: Path) -> None:
    data = path.read_bytes()
    assert data[:5] == b"%PDF-" and b"%%EOF" in data[-1024:] and len(data) > 3000, path


def _kinds(names: set[str], patterns: dict[str, str]) -> dict[str, list[str]]:
    return {kind: sorted(n for n in names if re.fullmatch(pattern, n))
            for kind, pattern in patterns.items()}


def _check_pairs(paths: list[Path]) -> None:
    """Every PNG drawn and its PDF beside it (and the other way round)."""
    pngs = [p for p in paths if p.suffix == ".png"]
    pdfs = [p for p in paths if p.suffix == ".pdf"]
    assert {p.stem for p in pngs} == {p.stem for p in pdfs}
    for path in pngs:
        assert_drawn_png(path)
    for path in pdfs:
        assert_pdf(path)


def test_the_comparison_report_draws_every_kind(comparison):
    # (test_build's --split valid report may have added its own, ending in _valid)
    figures = sorted(p for p in (comparison / "report" / "figures").iterdir()
                     if p.stem.endswith("_test"))
    names = {p.stem for p in figures}
    kinds = _kinds(names, {
        "metric vs K": r"synthetic_ndcg_vs_k_test",
        "grid": r"synthetic_lrr_grid_test",
        "sampled curves": r"synthetic_(ease|lrr|most_popular)_sampled_ndcg_(n_20|adaptive)_test",
        "estimator error": r"synthetic_(ease|lrr|most_popular)_estimator_error_ndcg_"
                           r"(n_20|adaptive)_test",
        "rank histogram": r"synthetic_(ease|lrr|most_popular)_sampled_ranks_(n_20|adaptive)_test",
    })
    assert len(kinds["metric vs K"]) == len(kinds["grid"]) == 1
    for kind in ("sampled curves", "estimator error", "rank histogram"):
        assert len(kinds[kind]) == 3 * 2, kind  # each model's chosen run, both settings
    assert set().union(*kinds.values()) == names
    _check_pairs(figures)
    page = (comparison / "report" / "report_test.html").read_text()
    assert page.count("data:image/png;base64,") == len(names)


def test_the_runs_draw_every_kind(comparison):
    run = next((comparison / "multirun").rglob("model=ease,seed=0"))
    written = sorted(p for p in run.iterdir() if p.suffix in (".png", ".pdf"))
    assert {p.stem for p in written} == {"sampled_ndcg_test", "estimator_error_ndcg_test",
                                         "sampled_ranks_test"}
    _check_pairs(written)


def test_the_studies_report_draws_and_copies_every_kind(studies):
    """Training curves of the loss study's MF runs, the sampled-estimator figures of the
    sampling study's models, the linear-model study's heat map and spectral profile (copied:
    the report stands alone), and what the study runs wrote themselves."""
    figures = sorted((studies / "report" / "figures").iterdir())
    names = {p.stem for p in figures}
    kinds = _kinds(names, {
        "training": r"synthetic_\w+_mf_(ccl|debiased_ccl)_training_test",
        "sampled curves": r"synthetic_\w+_(ease|most_popular)_sampled_ndcg_(n_20|adaptive)_test",
        "estimator error": r"synthetic_\w+_(ease|most_popular)_estimator_error_ndcg_"
                           r"(n_20|adaptive)_test",
        "rank histogram": r"synthetic_\w+_(ease|most_popular)_sampled_ranks_(n_20|adaptive)_test",
        "metric vs K": r"synthetic_\w+_(ndcg|recall)_vs_k_test",
        "spectral profile": r"study_linear_models_linear_models_seed_[01]_spectral_profile",
        "study grid": r"study_linear_models_linear_models_seed_[01]_grid_lrr",
        # the study's scored points are runs of the report too: its own heat map of LRR
        "report grid": r"synthetic_\w+_lrr_grid_test",
    })
    assert len(kinds["training"]) == 2 and len(kinds["metric vs K"]) == 3
    assert len(kinds["spectral profile"]) == len(kinds["study grid"]) == 2
    assert len(kinds["report grid"]) == 1
    for kind in ("sampled curves", "estimator error", "rank histogram"):
        assert len(kinds[kind]) == 2 * 2, kind
    assert set().union(*kinds.values()) == names
    _check_pairs(figures)
    for copy in kinds["spectral profile"]:
        seed = copy.split("_seed_")[1][0]
        original = studies / "studies" / "linear_models" / f"seed={seed}" / "figures"
        assert (studies / "report" / "figures" / f"{copy}.png").read_bytes() == \
            (original / "spectral_profile.png").read_bytes()
    page = (studies / "report" / "report_test.html").read_text()
    assert page.count("data:image/png;base64,") == len(names)
    # the study runs' own figures
    root = studies / "studies"
    mf = sorted(p for p in (root / "loss_study" / "seed=0" / "runs" / "small" / "ccl").iterdir()
                if p.suffix in (".png", ".pdf"))
    assert {p.stem for p in mf} == {"training_curve"}
    sampled = sorted(p for p in (root / "sampling_study" / "seed=0" / "runs" / "ease").iterdir()
                     if p.suffix in (".png", ".pdf"))
    assert {p.stem for p in sampled} == {"sampled_ndcg_test", "estimator_error_ndcg_test",
                                         "sampled_ranks_test"}
    study = sorted((root / "linear_models" / "seed=0" / "figures").iterdir())
    assert {p.stem for p in study} == {"spectral_profile", "grid_lrr"}
    _check_pairs(mf + sampled + study)


def test_a_grid_heat_map_shows_the_mean_selection_value(comparison):
    """The report's LRR heat map: the validation selection value of each (rank, λ), mean over
    the two seeds, recomputed from results.json."""
    import json

    import pandas as pd

    from linrec.report.figures import _grid

    rows = []
    for path in (comparison / "multirun").rglob("results.json"):
        rec = json.loads(path.read_text())
        if rec["model"] == "lrr":
            rows.append({"param.rank": rec["config"]["model"]["rank"],
                         "param.lam": rec["config"]["model"]["lam"],
                         "selection_value": rec["selection"]["value"],
                         "selection_metric": "ndcg@100", "selection_split": "valid"})
    fig = _grid(pd.DataFrame(rows), "lrr")
    image = fig.axes[0].images[0].get_array()
    expected = pd.DataFrame(rows).groupby(["param.rank", "param.lam"])["selection_value"].mean()
    np.testing.assert_allclose(np.asarray(image), expected.to_numpy().reshape(2, 2), rtol=1e-12)
    assert "ndcg@100 on valid" in fig.axes[0].get_title()


def _sweep_record(loss: str, negatives: int, seed: int, recall: float) -> dict:
    return {"dataset": {"name": "toy"}, "model": "mf", "seed": seed,
            "config": {"seed": seed, "data": {"source": {"name": "toy"}},
                       "model": {"name": "mf", "seed": seed, "loss": {"name": loss},
                                 "epochs": 20, "sampling": {"n_negatives": negatives}}},
            "selection": {"metric": "recall@20", "split": "valid", "value": recall},
            "splits": {"test": {"exact": {"recall@20": recall, "ndcg@20": recall / 2}}}}


def test_a_sweep_over_one_setting_is_one_line_per_loss(tmp_path):
    """Two losses swept over the number of negatives, two seeds each: one figure per metric,
    one line per loss at the mean over seeds with its std as the error bar."""
    from linrec.report.figures import _sweep_lines
    from linrec.report.runs import read_runs
    from tests.report.records import write_record

    values = {("ccl", 10): (0.10, 0.12), ("ccl", 100): (0.20, 0.22), ("ccl", 1000): (0.25, 0.25),
              ("mse", 10): (0.05, 0.07), ("mse", 100): (0.08, 0.08), ("mse", 1000): (0.09, 0.11)}
    for (loss, negatives), recalls in values.items():
        for seed, recall in enumerate(recalls):
            write_record(tmp_path / f"{loss}_{negatives}_{seed}",
                         _sweep_record(loss, negatives, seed, recall))
    group = read_runs([tmp_path]).complete
    figures = _sweep_lines(group, ["recall@20", "ndcg@20"], "test", "toy")
    assert [(m, s) for m, s, _ in figures] == [("recall@20", "param.sampling.n_negatives"),
                                               ("ndcg@20", "param.sampling.n_negatives")]
    ax = figures[0][2].axes[0]
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "sampling.n_negatives"
    # the points were trained alike: the figure states the budget they shared
    assert ax.get_title() == "toy: recall@20 against sampling.n_negatives, ≤ 20 epochs each"
    lines = {c.get_label(): c for c in ax.containers}  # an errorbar plot: one per loss
    assert sorted(lines) == ["mf/ccl (2 seeds)", "mf/mse (2 seeds)"]
    x, y = lines["mf/ccl (2 seeds)"].lines[0].get_data()
    np.testing.assert_allclose(np.asarray(x, float), [10, 100, 1000])
    np.testing.assert_allclose(np.asarray(y, float), [0.11, 0.21, 0.25])
    (bars,) = lines["mf/ccl (2 seeds)"].lines[2]
    half = [seg[1][1] - seg[0][1] for seg in bars.get_segments()]
    # ± the std over seeds each way, ddof 1 as in the comparison table
    np.testing.assert_allclose(half, [0.02 * 2**0.5, 0.02 * 2**0.5, 0.0], atol=1e-12)
    # a point with a third seed: the legend gives the range of seeds per point
    write_record(tmp_path / "ccl_10_2", _sweep_record("ccl", 10, 2, 0.14))
    figures = _sweep_lines(read_runs([tmp_path]).complete, ["recall@20"], "test", "toy")
    labels = sorted(c.get_label() for c in figures[0][2].axes[0].containers)
    assert labels == ["mf/ccl (2–3 seeds)", "mf/mse (2 seeds)"]
    # the losses trained for different budgets: none is stated
    other = tmp_path.parent / f"{tmp_path.name}_budgets"
    for (loss, negatives), recalls in values.items():
        record = _sweep_record(loss, negatives, 0, recalls[0])
        record["config"]["model"]["epochs"] = 20 if loss == "ccl" else 40
        write_record(other / f"{loss}_{negatives}", record)
    (fig,) = [f for _, _, f in _sweep_lines(read_runs([other]).complete, ["recall@20"], "test",
                                           "toy")]
    assert fig.axes[0].get_title() == "toy: recall@20 against sampling.n_negatives"
    # a second swept setting: no line figure (the heat map or nothing takes over)
    write_record(tmp_path / "other", {**_sweep_record("ccl", 10, 3, 0.1), "config": {
        "seed": 3, "data": {"source": {"name": "toy"}},
        "model": {"name": "mf", "seed": 3, "loss": {"name": "ccl"}, "dim": 8,
                  "sampling": {"n_negatives": 10}}}})
    assert _sweep_lines(read_runs([tmp_path]).complete, ["recall@20"], "test", "toy") == []


def test_a_published_point_is_a_star_on_its_losss_line(tmp_path):
    """`--published` marks the value at its setting in the colour of the model's line, on the
    figures of the metrics it gives; a point of another setting or model is not drawn, and the
    report says so."""
    import pytest

    from linrec.errors import ConfigError
    from linrec.report import build_report
    from linrec.report.figures import PublishedPoint, _sweep_lines, parse_published
    from linrec.report.runs import read_runs
    from tests.report.records import write_record

    for loss, negatives, recall in [("ccl", 10, 0.1), ("ccl", 100, 0.2), ("mse", 10, 0.05),
                                    ("mse", 100, 0.08)]:
        write_record(tmp_path / "runs" / f"{loss}_{negatives}",
                     _sweep_record(loss, negatives, 0, recall))
    points = [parse_published("mf/ccl sampling.n_negatives=800 recall@20=0.1817"),
              parse_published("mf/mse model.sampling.n_negatives=50 ndcg@20=0.06"),
              parse_published("mf/ccl dim=64 recall@20=0.3")]
    assert points[0] == PublishedPoint("mf/ccl", "sampling.n_negatives", 800.0,
                                       {"recall@20": 0.1817})
    group = read_runs([tmp_path / "runs"]).complete
    figures = {m: f for m, _, f in _sweep_lines(group, ["recall@20", "ndcg@20"], "test", "toy",
                                                points)}
    for metric, model, x, y in [("recall@20", "mf/ccl", 800, 0.1817),
                                ("ndcg@20", "mf/mse", 50, 0.06)]:
        ax = figures[metric].axes[0]
        (star,) = [line for line in ax.lines if line.get_label().endswith("published")]
        assert star.get_label() == f"{model}: published" and star.get_marker() == "*"
        np.testing.assert_allclose(np.asarray(star.get_data(), float).ravel(), [x, y])
        (errorbar,) = [c for c in ax.containers if c.get_label().startswith(model)]
        assert star.get_color() == errorbar.lines[0].get_color()
        assert ax.get_xlim()[0] <= x <= ax.get_xlim()[1]
    report = build_report([tmp_path / "runs"], out=tmp_path / "report", bootstrap=0,
                          published=["mf/ccl dim=64 recall@20=0.3"])
    assert "no run of mf/ccl has the setting dim; the point is not drawn" in report.markdown
    drawn = "mf/ccl sampling.n_negatives=800 recall@20=0.1817"
    unshown = "mf/ccl sampling.n_negatives=800 precision@5=0.05"
    report = build_report([tmp_path / "runs"], out=tmp_path / "report", bootstrap=0,
                          published=[drawn, unshown])
    assert f"`--published '{drawn}'`" not in report.markdown
    assert f"`--published '{unshown}'`: no figure shows mf/ccl's precision@5 against " \
        "sampling.n_negatives, so the point is not drawn" in report.markdown
    # CCL swept over a second setting: no line figure, and the report says the star is missing
    write_record(tmp_path / "runs" / "ccl_dim", {**_sweep_record("ccl", 10, 0, 0.1), "config": {
        "seed": 0, "data": {"source": {"name": "toy"}},
        "model": {"name": "mf", "seed": 0, "loss": {"name": "ccl"}, "dim": 8,
                  "sampling": {"n_negatives": 10}}}})
    report = build_report([tmp_path / "runs"], out=tmp_path / "report", bootstrap=0,
                          published=[drawn])
    assert f"`--published '{drawn}'`: no figure shows mf/ccl's recall@20 against " \
        "sampling.n_negatives" in report.markdown
    for bad, match in [("mf/ccl recall@20=0.2", "one setting and at least one metric"),
                       ("mf/ccl temperature=0.4", "one setting and at least one metric"),
                       ("mf/ccl temperature=warm recall@20=0.2", "temperature=warm is not a"),
                       ("mf/ccl temperature", "is not a setting=value pair"),
                       ("", "no model")]:
        with pytest.raises(ConfigError, match=match):
            parse_published(bad)

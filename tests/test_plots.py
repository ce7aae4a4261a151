"""linrec.plots: the Figure 11 view of spectral profiles, written atomically."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from matplotlib.figure import Figure

from linrec.errors import ConfigError
from linrec.models.profile import spectral_profile
from linrec.models.spectral import LRR, ClosedFormMF, compute_spectrum
from linrec.plots import plot_spectral_profile


@pytest.fixture(scope="module")
def train() -> sp.csr_matrix:
    rng = np.random.default_rng(21)
    dense = rng.random((200, 30)) < 0.2
    dense[rng.integers(0, 200, 30), np.arange(30)] = True
    return sp.csr_matrix(dense.astype(np.float32))


def test_plot_spectral_profile_writes_atomically(tmp_path, train):
    spectrum = compute_spectrum(train)
    profiles = {
        "LRR": spectral_profile(LRR(rank=20, lam=30.0).fit(train)),
        "MF": spectral_profile(ClosedFormMF(rank=20, lam=3.0).fit(train)),
    }
    path = tmp_path / "fig" / "profile.png"
    fig = plot_spectral_profile(profiles, path=path)
    assert isinstance(fig, Figure)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["profile.png"]
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["LRR", "MF"]
    np.testing.assert_allclose(ax.get_lines()[1].get_ydata(), profiles["MF"])
    shrunk = plot_spectral_profile(profiles, spectrum.singular_values, quantity="shrunk")
    lines = shrunk.axes[0].get_lines()
    assert len(lines) == 3
    np.testing.assert_allclose(lines[1].get_ydata(), profiles["LRR"] * spectrum.singular_values)


@pytest.mark.parametrize("kwargs", [{"quantity": "log"}, {"quantity": "shrunk"},
                                    {"profiles": {}}])
def test_plot_spectral_profile_bad_input(kwargs):
    args = {"profiles": {"a": np.ones(3)}} | kwargs
    with pytest.raises(ConfigError):
        plot_spectral_profile(**args)


def _not_blank(path) -> None:
    from PIL import Image

    assert path.stat().st_size > 3000
    pixels = np.asarray(Image.open(path).convert("L"), dtype=np.float64)
    assert pixels.std() > 10 and (pixels < 128).mean() > 0.003


def figure_record() -> dict:
    """A results.json-shaped record with everything a run draws: a test split's sampled
    setting (exact, naive and MLE curves, a rank histogram) and a training log."""
    ks = np.arange(1, 51)
    exact = 0.4 * (1 - np.exp(-ks / 10))
    setting = {"protocol": {"sample_size": 100, "repeats": 5},
               "curves": {"exact": {"ndcg": exact.tolist()},
                          "naive": {"ndcg": (exact * 3).tolist()},
                          "mle": {"ndcg": (exact * 0.97).tolist()}},
               "rank_histogram": {"rank": list(range(1, 102)),
                                  "count": (1000 / np.arange(1, 102)).astype(int).tolist()}}
    return {"splits": {"test": {"sampled": {"n=100": setting}}},
            "training": {"epochs": [{"epoch": e, "loss": 1 / e, "valid": 0.1 + 0.01 * e,
                                     "lr": 1e-3} for e in range(1, 8)]}}


#: the files `run_figures` writes for `figure_record()`
FIGURE_FILES = sorted(f"{stem}.{fmt}" for stem in (
    "sampled_ndcg_test", "estimator_error_ndcg_test", "sampled_ranks_test", "training_curve")
    for fmt in ("png", "pdf"))


def test_every_run_figure_is_drawn_from_the_record(tmp_path):
    """The figures a run writes, from a results.json-shaped record: the sampled metric and the
    estimators' relative error against K, the sampled-rank histogram, the training curve (PNG
    and PDF each), checked to be drawn, not blank."""
    from linrec.plots import run_figures

    written = run_figures(figure_record(), tmp_path)
    names = sorted(p.name for p in written)
    assert names == FIGURE_FILES
    for path in written:
        if path.suffix == ".png":
            _not_blank(path)
        else:
            assert path.read_bytes()[:5] == b"%PDF-"


def test_heatmap_marks_missing_cells_and_checks_its_shape(tmp_path):
    from linrec.plots import plot_heatmap

    values = np.array([[0.1, np.nan], [0.3, 0.4]])
    plot_heatmap(values, [10, 20], [1.0, 100.0], "rank", "lam", path=tmp_path / "grid.png")
    _not_blank(tmp_path / "grid.png")
    with pytest.raises(ConfigError, match="do not match"):
        plot_heatmap(values, [10], [1.0, 100.0], "rank", "lam")


def test_curve_metric_prefers_the_asked_metric_then_the_first():
    from linrec.plots import curve_metric

    setting = {"curves": {"exact": {"recall": [0.1], "ndcg": [0.2]}}}
    assert curve_metric(setting) == "ndcg"
    assert curve_metric(setting, ("ap", "recall")) == "recall"
    assert curve_metric(setting, ("ap", None)) == "recall"
    assert curve_metric({"curves": {}}) is None and curve_metric({}) is None


def test_setting_figures_names_and_draws_each_kind(tmp_path):
    """The report's prefix and suffix on the three figures of one sampled setting; no
    histogram when the record has none."""
    from linrec.plots import setting_figures

    ks = np.arange(1, 21)
    setting = {"protocol": {"sample_size": 50, "repeats": 3},
               "curves": {"exact": {"recall": (ks / 40).tolist()},
                          "naive": {"recall": (ks / 20).tolist()},
                          "bv": {"recall": (ks / 41).tolist()}},
               "rank_histogram": {"rank": [1, 2, 3], "count": [30, 10, 5]}}
    written = setting_figures(setting, "recall", tmp_path, prefix="ds_ease_", suffix="_n_50_valid")
    assert sorted(p.name for p in written) == sorted(
        f"ds_ease_{kind}_n_50_valid.{ext}" for kind in ("sampled_recall", "estimator_error_recall",
                                                      "sampled_ranks") for ext in ("png", "pdf"))
    for path in written:
        if path.suffix == ".png":
            _not_blank(path)
        else:
            assert path.read_bytes()[:5] == b"%PDF-"
    setting.pop("rank_histogram")
    assert len(setting_figures(setting, "recall", tmp_path / "b")) == 4


def test_the_rank_histogram_draws_each_ranks_count_and_nothing_between():
    """Ranks 1, 2, 5 and 9 with counts 100, 10, 3 and 1: the outline's level over each rank
    (its horizontal segments, read from the drawn path) is that rank's count, and 0 over the
    ranks without items (3, 4, 6–8)."""
    from linrec.plots import plot_rank_histogram

    setting = {"rank_histogram": {"rank": [1, 2, 5, 9], "count": [100, 10, 3, 1]},
               "protocol": {"sample_size": 100, "repeats": 1}}
    ax = plot_rank_histogram(setting).axes[0]
    assert ax.get_yscale() == "log"
    [outline] = ax.patches
    vertices = outline.get_path().vertices
    levels = [(min(x0, x1), max(x0, x1), y0) for (x0, y0), (x1, y1)
              in zip(vertices[:-1], vertices[1:], strict=True) if y0 == y1 and x0 != x1]
    for rank in range(1, 10):
        over = [y for lo, hi, y in levels if lo < rank < hi and y > 0]
        assert over == ([{1: 100, 2: 10, 5: 3, 9: 1}[rank]] if rank in (1, 2, 5, 9) else [])


def test_both_formats_are_cropped_to_the_box_savefig_finds(tmp_path):
    """The PNG is byte for byte matplotlib's own `bbox_inches="tight"` file; the PDF's page is
    the same box (in points, to a tenth of a point of the PNG's pixels at 100 dpi)."""
    import io
    import re

    from linrec.plots import plot_rank_histogram, save_figure_formats

    setting = {"rank_histogram": {"rank": list(range(1, 31)), "count": list(range(300, 0, -10))},
               "protocol": {"sample_size": 30, "repeats": 1}}
    png, pdf = save_figure_formats(plot_rank_histogram(setting), tmp_path / "hist")
    reference = io.BytesIO()
    plot_rank_histogram(setting).savefig(reference, format="png", bbox_inches="tight")
    assert png.read_bytes() == reference.getvalue()
    width, height = (int.from_bytes(png.read_bytes()[16 + 4 * i:20 + 4 * i], "big")
                     for i in range(2))  # the PNG header's IHDR
    box = re.search(rb"/MediaBox \[\s*([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+)\s*\]",
                    pdf.read_bytes())
    points = [float(v) for v in box.groups()]
    assert abs((points[2] - points[0]) - width * 0.72) < 0.72 + 0.1
    assert abs((points[3] - points[1]) - height * 0.72) < 0.72 + 0.1


def test_log_axes_label_the_ticks_matplotlib_labels_in_plain_text(monkeypatch):
    """A log axis labels exactly the ticks matplotlib's own formatter labels, with the same
    numbers written as plain text (10⁻², 3×10⁻²: what its mathtext shows), for axes over many
    decades and within one; drawing never parses mathtext."""
    import re

    import matplotlib.mathtext
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from linrec.plots import log_scale

    superscript = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")

    def number(label: str) -> float:
        """A plain label's value, read independently of the formatter."""
        label = label.replace("\N{MINUS SIGN}", "-")
        coefficient, _, power = label.partition("×")
        if not power:
            power, coefficient = coefficient, "1"
        if re.fullmatch(r"10[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+", power):
            return float(coefficient) * 10.0 ** int(power[2:].translate(superscript))
        return float(coefficient) * float(power)

    def labels(ax, which):
        axis = getattr(ax, f"{which}axis")
        ticks = [*axis.get_major_ticks(), *axis.get_minor_ticks()]
        return [(t.get_loc(), t.label1.get_text()) for t in ticks]

    for low, high in ((1e-4, 50.0), (0.02, 0.09), (3.0, 7.0)):
        ours, theirs = Figure(), Figure()
        for fig in (ours, theirs):
            FigureCanvasAgg(fig)
            fig.add_subplot().plot([1, 2], [low, high])
        log_scale(ours.axes[0], "y")
        theirs.axes[0].set_yscale("log")
        for fig in (ours, theirs):
            fig.axes[0].set_ylim(low, high)
            fig.canvas.draw()
        mine, reference = labels(ours.axes[0], "y"), labels(theirs.axes[0], "y")
        assert [loc for loc, _ in mine] == [loc for loc, _ in reference]
        labelled = [(loc, text) for loc, text in mine if text]
        assert labelled and [loc for loc, _ in labelled] == [
            loc for loc, text in reference if text]
        for loc, text in labelled:
            assert "$" not in text
            assert number(text) == pytest.approx(loc, rel=1e-9), (text, loc)

    def no_mathtext(*args, **kwargs):
        raise AssertionError("mathtext parsed")

    monkeypatch.setattr(matplotlib.mathtext.MathTextParser, "parse", no_mathtext)
    from linrec.plots import plot_rank_histogram, plot_relative_errors, save_figure_formats

    ks = np.arange(1, 30)
    setting = {"protocol": {"sample_size": 50, "repeats": 3},
               "curves": {"exact": {"recall": (ks / 40).tolist()},
                          "naive": {"recall": (ks / 20).tolist()}},
               "rank_histogram": {"rank": [1, 2, 3], "count": [3000, 10, 5]}}
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as directory:
        save_figure_formats(plot_relative_errors(setting, "recall"), Path(directory) / "e")
        save_figure_formats(plot_rank_histogram(setting), Path(directory) / "r")

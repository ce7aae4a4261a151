"""linrec.experiment.run in process: what it checks before the (possibly long) data loading and
fit, and how a run directory is replaced by the next run into it."""

from __future__ import annotations

import pytest

from linrec.errors import ConfigError
from linrec.experiment import run
from tests.conftest import compose_config

SMALL = ["data.source.n_users=400", "data.source.n_items=150", "eval.sampled.repeats=2",
         "eval.sampled.sample_sizes=[20]", "quiet=true"]


@pytest.fixture(autouse=True)
def _data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("LINREC_DATA", str(tmp_path / "cache"))


@pytest.mark.parametrize(
    "override, match",
    [
        ("eval.sampled.sample_sizes=[1000]", r"^eval.sampled.sample_sizes=1000 is out of range"),
        ("eval.sampled.adaptive.n0=1000", r"^eval.sampled.adaptive.n0=1000 is out of range"),
        ("eval.ks=[500] eval.selection=auc", r"eval.ks=\[500\]: no K <= n_items"),
    ],
)
def test_settings_beyond_the_catalogue_fail_before_the_fit(tmp_path, monkeypatch, override,
                                                          match):
    from linrec.models import EASE

    def no_fit(self, *args, **kwargs):
        raise AssertionError("the model was fitted before the config error")

    monkeypatch.setattr(EASE, "fit", no_fit)
    with pytest.raises(ConfigError, match=match):
        run(compose_config(*SMALL, *override.split()), run_dir=tmp_path / "run")


def test_model_parameters_are_checked_before_the_data_is_loaded(tmp_path, monkeypatch):
    """A bad model parameter used to surface only after the (possibly slow) data preparation."""
    import linrec.data.pipeline as pipeline

    def no_data(cfg):
        raise AssertionError("the data was prepared before the model config was checked")

    monkeypatch.setattr(pipeline, "prepare_data", no_data)
    with pytest.raises(ConfigError, match="lam"):
        run(compose_config(*SMALL, "model.lam=-1"), run_dir=tmp_path / "run")


def test_failed_and_successful_runs_replace_each_others_records(tmp_path):
    from linrec.results import mark_failed

    run_dir = tmp_path / "run"
    cfg = compose_config(*SMALL, "eval.sampled.enabled=false")
    run(cfg, run_dir=run_dir)
    assert (run_dir / "results.json").exists()
    # a failed rerun into the same directory must not leave the old results behind
    mark_failed(run_dir, "ConfigError: bad")
    assert not (run_dir / "results.json").exists()
    assert (run_dir / "FAILED").read_text() == "ConfigError: bad\n"
    run(cfg, run_dir=run_dir)  # and a successful rerun clears the marker
    assert (run_dir / "results.json").exists() and not (run_dir / "FAILED").exists()


def test_a_run_records_the_source_it_started_from(tmp_path, monkeypatch):
    """The checkout's commit as the run starts, not as it ends: a commit made while a long run
    trains (the run's modules are loaded) does not name the run's source."""
    import functools
    import json

    import linrec.experiment
    from linrec import results

    checkout = {"commit": "a" * 40}
    monkeypatch.setattr(results, "_read_source_revision",
                        functools.cache(lambda: {"version": "0", **checkout}))
    fit_and_evaluate = linrec.experiment.fit_and_evaluate

    def commit_meanwhile(*args, **kwargs):
        checkout["commit"] = "b" * 40  # the checkout moves on during the fit
        return fit_and_evaluate(*args, **kwargs)

    monkeypatch.setattr(linrec.experiment, "fit_and_evaluate", commit_meanwhile)
    run(compose_config(*SMALL, "eval.sampled.enabled=false", "figures=false"),
        run_dir=tmp_path / "run")
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["environment"]["linrec"] == {"version": "0", "commit": "a" * 40}
    assert results.source_revision() == {"version": "0", "commit": "a" * 40}


def test_run_returns_the_validation_selection_metric(tmp_path):
    import json

    cfg = compose_config(*SMALL, "eval.sampled.enabled=false", "save_model=true")
    value = run(cfg, run_dir=tmp_path / "run")
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert value == record["splits"]["valid"]["exact"]["ndcg@100"] == record["selection"]["value"]
    assert record["config"]["model"] == {"name": "ease", "lam": 500.0, "dtype": "float32",
                                         "num_threads": 0, "device": "cpu"}
    assert (tmp_path / "run" / "model.pkl").exists() and (tmp_path / "run" / "ranks.npz").exists()


MF_SMALL = [*SMALL, "eval.sampled.enabled=false", "model=mf", "model.epochs=3", "model.lr=0.01",
            "model.init_std=0.1", "model.sampling.n_negatives=20"]


@pytest.mark.parametrize("select_on", ["valid", "test"])
def test_a_trained_model_records_its_epochs_the_split_they_were_selected_on_and_its_curve(
        tmp_path, select_on):
    import json

    from matplotlib.image import imread

    split = ["data.split.valid_fraction=0"] if select_on == "test" else []
    run(compose_config(*MF_SMALL, *split, f"model.select_on={select_on}",
                       f"model.checkpoint_dir={tmp_path / 'ckpt'}"), run_dir=tmp_path / "run")
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    training = record["training"]
    assert training["selected_on"] == select_on
    assert [e["epoch"] for e in training["epochs"]] == [1, 2, 3]
    assert all(set(e) >= {"loss", "lr", "valid", "seconds"} for e in training["epochs"])
    best = max(training["epochs"], key=lambda e: e["valid"])
    assert training["best_epoch"] == best["epoch"]
    if select_on == "test":  # the test metric the epochs were selected on is the one reported
        assert record["splits"]["test"]["exact"]["ndcg@100"] == pytest.approx(best["valid"])
    figure = tmp_path / "run" / "training_curve.png"
    pixels = imread(figure)
    assert figure.stat().st_size > 5000 and pixels.std() > 0.01  # drawn, not blank


def test_selecting_on_a_validation_split_that_does_not_exist_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="model.select_on=valid: the data has no validation"):
        run(compose_config(*MF_SMALL, "data.split.valid_fraction=0"), run_dir=tmp_path / "run")
    assert not (tmp_path / "run" / "results.json").exists()


def write_lightgcn_split(directory, n_users: int = 120, n_items: int = 60, seed: int = 0):
    """A small LightGCN-format split (train.txt, test.txt: `user item item ...`)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True)
    with open(directory / "train.txt", "w") as train, open(directory / "test.txt", "w") as test:
        for user in range(n_users):
            items = rng.choice(n_items, size=int(rng.integers(6, 15)), replace=False)
            train.write(" ".join(map(str, [user, *items[2:]])) + "\n")
            test.write(" ".join(map(str, [user, *items[:2]])) + "\n")


@pytest.mark.parametrize("preset", ["mf_ccl_simplex", "mf_bpr_gowalla",
                                    "mf_mine_plus_gowalla", "mf_mine_plus_yelp2018",
                                    "mf_mine_plus_amazon_book",
                                    "mf_debiased_ccl_gowalla", "mf_debiased_ccl_yelp2018",
                                    "mf_debiased_ccl_amazon_book"])
def test_every_published_mf_preset_runs_on_files_a_user_supplies(tmp_path, preset):
    """Yelp2018 and Amazon-Books are not here: their presets must still run once a user gives
    a directory in the LightGCN format (here a small one, trained briefly)."""
    import json

    write_lightgcn_split(tmp_path / "mine")
    run(compose_config(f"experiment={preset}", f"data.path={tmp_path / 'mine'}", "quiet=true",
                       "model.epochs=2", "model.sampling.n_negatives=8",
                       f"model.checkpoint_dir={tmp_path / 'ckpt'}"), run_dir=tmp_path / "run")
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    variant = next(d for d in ("gowalla", "yelp2018", "amazon-book")
                   if d.replace("-", "_") in preset or preset == "mf_ccl_simplex")
    assert record["dataset"]["name"] == f"lightgcn-{variant}"  # the dataset the preset is for
    assert record["dataset"]["n_users"] == 120
    assert set(record["splits"]["test"]["exact"]) == {"recall@20", "ndcg@20"}
    assert len(record["training"]["epochs"]) == 2


def test_the_bpr_preset_is_freerecs_published_bprmf_run():
    """FreeRec's BPRMF on Gowalla_m1 (examples/General/MF-BPR): d 64, inner products, init
    N(0, 1e-4), Adam 1e-3 at a constant rate, weight decay 1e-8, batch 2048, users drawn
    uniformly, one negative the user has not seen, no dropout; selected on test as published."""
    from linrec.config import run_config

    model = run_config(compose_config("experiment=mf_bpr_gowalla")).model
    assert (model.loss.name, model.loss.reduction, model.similarity) == ("bpr", "sum", "dot")
    assert (model.dim, model.init_std, model.dropout, model.reg) == (64, 1e-4, 0.0, 1e-8)
    assert (model.optimizer, model.lr, model.lr_factor, model.batch_size) == \
        ("adam", 1e-3, 1.0, 2048)
    assert (model.sampling.examples, model.sampling.negatives, model.sampling.n_negatives,
            model.sampling.pool) == ("users", "per_example", 1, "unlabeled")
    assert (model.select_on, model.epochs) == ("test", 500)


@pytest.mark.parametrize("model", ["ease", "mf"])
def test_the_test_split_figures_are_sent_ahead_and_are_the_runs(tmp_path, monkeypatch, caplog,
                                                                model):
    """The run scores its test split first and sends the figure process that split alone (and
    a trained model's training log); the figures it gets back are those drawn in-process from
    its results.json, byte for byte."""
    import json
    import logging

    import linrec.experiment as experiment
    from linrec.figure_process import FigureProcess
    from linrec.plots import run_figures

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # PDFs compared byte for byte
    sent = []

    class Spy(FigureProcess):
        def __init__(self, enabled=True):
            super().__init__(enabled, reuse_loaded=False)  # a child even with matplotlib loaded

        def send(self, record, run_dir):
            sent.append(list(record["splits"]))
            super().send(record, run_dir)

    monkeypatch.setattr(experiment, "FigureProcess", Spy)
    with caplog.at_level(logging.INFO, logger="linrec"):
        overrides = [] if model == "ease" else [  # MF with the sampled block's figures
            *(o for o in MF_SMALL[len(SMALL):] if not o.startswith("eval.sampled")),
            f"model.checkpoint_dir={tmp_path / 'ckpt'}"]
        run(compose_config(*SMALL, *overrides), run_dir=tmp_path / "run")
    assert sent == [["test"]]
    assert "drawn by the figure process" in caplog.text and "were not the run's" not in caplog.text
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert list(record["splits"]) == ["valid", "test"]
    drawn = sorted(run_figures(record, tmp_path / "in_process"))
    assert ("training_curve.png" in {p.name for p in drawn}) == (model == "mf")
    assert [p.name for p in drawn] == sorted(p.name for p in (tmp_path / "run").iterdir()
                                             if p.suffix in (".png", ".pdf"))
    assert all(p.read_bytes() == (tmp_path / "run" / p.name).read_bytes() for p in drawn)

"""experiment=linear_models end to end on small synthetic data: every grid point is a run, the
best point is scored on the test users, and the tables agree with an independent evaluation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from linrec.experiment import run
from tests.studies.conftest import SMALL_DATA, compose_config


def test_linear_models_study(tmp_path):
    cfg = compose_config(
        "experiment=linear_models", "data=synthetic", *SMALL_DATA, "quiet=true",
        "data.split.n_valid_users=60", "data.split.n_test_users=60",
        "~study.models", "+study.models={ease: {model: ease, grid: {lam: [5.0, 50.0]}},"
        " lrr: {model: lrr, grid: {rank: [10, 20], lam: [10.0, 100.0, 1000.0]}},"
        " mf: {model: mf_closed, train_on: train_and_foldin, grid: {rank: [10], lam: [0.0, 2.0]}}}",
    )
    best = run(cfg, run_dir=tmp_path / "run")
    index = json.loads((tmp_path / "run" / "study.json").read_text())
    families = index["summary"]["families"]
    tables = tmp_path / "run" / "tables"
    grid = (tables / "grid_lrr.md").read_text()
    assert "rank \\ lam" in grid and "\n| 10 |" in grid and "\n| 20 |" in grid  # rows: k
    for label, fam in families.items():
        values = [row["ndcg@100"] for row in fam["grid"]]
        assert fam["valid"]["ndcg@100"] == max(values), label
    assert best == max(f["valid"]["ndcg@100"] for f in families.values())
    assert (tmp_path / "run" / "figures" / "spectral_profile.png").stat().st_size > 0
    assert index["figures"] == ["figures/spectral_profile.png", "figures/grid_lrr.png",
                                "figures/grid_mf.png"]
    assert (tmp_path / "run" / "figures" / "grid_lrr.pdf").stat().st_size > 0

    # every grid point is a run; the selected one holds the test split too
    runs = sorted((tmp_path / "run" / "runs").rglob("results.json"))
    assert len(runs) == 2 + 6 + 2
    point = json.loads((tmp_path / "run" / "runs" / "lrr" / "rank=10,lam=10.0" / "results.json")
                       .read_text())
    assert point["study"]["point"] == {"rank": 10, "lam": 10.0}
    assert point["config"]["model"] == {"name": "lrr", "rank": 10, "lam": 10.0}
    assert point["selection"]["split"] == "valid"
    lam = families["ease"]["best"]["lam"]
    chosen = json.loads((tmp_path / "run" / "runs" / "ease" / f"lam={lam}" / "results.json")
                        .read_text())
    assert set(chosen["splits"]) == {"valid", "test"}

    # the reported test numbers are those of the selected model, recomputed independently
    from linrec.data.pipeline import prepare_data
    from linrec.eval.exact import evaluate_exact
    from linrec.models import EASE

    split = prepare_data(record_data_config(cfg)).split
    model = EASE(lam=lam).fit(split.train)
    test = evaluate_exact(model, split.test, ks=[20, 50, 100], metrics=["recall_trunc", "ndcg"],
                          seed=0, users_known=False).metrics
    for key in ("recall_trunc@20", "recall_trunc@50", "ndcg@100"):
        np.testing.assert_allclose(families["ease"]["test"][key], test[key], rtol=1e-6)
        assert chosen["splits"]["test"]["exact"][key] == families["ease"]["test"][key]


def record_data_config(cfg):
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg.data, resolve=True)


def test_linear_models_family_must_name_its_model(tmp_path):
    from linrec.errors import ConfigError

    cfg = compose_config(
        "experiment=linear_models", "data=synthetic", *SMALL_DATA, "quiet=true",
        "~study.models", "+study.models={ease: {grid: {lam: [5.0]}}}",
    )
    with pytest.raises(ConfigError, match=r"study.models.ease=.* must be a mapping with a 'model'"):
        run(cfg, run_dir=tmp_path / "run")


def test_report_keys_must_be_computed(tmp_path):
    from linrec.errors import ConfigError

    cfg = compose_config("experiment=linear_models", "data=synthetic", *SMALL_DATA, "quiet=true",
                         "data.split.n_valid_users=60", "data.split.n_test_users=60",
                         "eval.ks=[10]", "~study.models",
                         "+study.models={ease: {model: ease, grid: {lam: [5.0]}}}")
    with pytest.raises(ConfigError, match="study.report: recall_trunc@20 is not computed"):
        run(cfg, run_dir=tmp_path / "run")


def test_models_are_fitted_with_the_runs_validation_callback(tmp_path, monkeypatch):
    """A non-spectral family is fitted like a run's model: `fit(train, validation)` with the
    run's selection metric on the validation users. Its score of each fitted model is the
    study's recorded validation value, for a family trained on the training users (users
    folded in) and one trained with the fold-in rows too (users known, scored by row)."""
    from linrec.models.als import WMF
    from linrec.models.ease import EASE

    fits = []
    for cls in (EASE, WMF):
        real = cls.fit

        def recording(self, train, validation=None, _real=real):
            fits.append((self, validation))
            return _real(self, train, validation)

        monkeypatch.setattr(cls, "fit", recording)
    cfg = compose_config(
        "experiment=linear_models", "data=synthetic", *SMALL_DATA, "quiet=true",
        "data.split.n_valid_users=60", "data.split.n_test_users=60", "~study.models",
        "+study.models={ease: {model: ease, grid: {lam: [5.0, 50.0]}},"
        " wmf: {model: wmf, train_on: train_and_foldin, grid: {factors: [8], reg: [1.0]}}}",
    )
    run(cfg, run_dir=tmp_path / "run")
    assert [type(model).__name__ for model, _ in fits] == ["EASE", "EASE", "WMF"]
    for model, validation in fits:
        label, point = (("ease", f"lam={model.lam}") if isinstance(model, EASE)
                        else ("wmf", "factors=8,reg=1.0"))
        record = json.loads((tmp_path / "run" / "runs" / label / point / "results.json")
                            .read_text())
        assert callable(validation)
        assert validation(model) == record["splits"]["valid"]["exact"]["ndcg@100"], label


def test_the_profile_is_drawn_for_models_with_an_item_item_matrix(tmp_path):
    """`weights()` decides: EASE (dense W) and item-KNN (sparse W) get f_i = v_iᵀ W v_i, a
    spectral grid scorer its own filter, a factor model (WMF) none."""
    import scipy.sparse as sp

    from linrec.models import build_model
    from linrec.models.profile import spectral_profile
    from linrec.models.spectral import clear_spectrum_cache, compute_spectrum, spectral_grid
    from linrec.studies.linear_models import _profile, _write_profiles

    clear_spectrum_cache()
    rng = np.random.default_rng(0)
    train = sp.csr_matrix((rng.random((200, 30)) < 0.2).astype(np.float32))
    spectrum = compute_spectrum(train)
    (_, lrr), = spectral_grid("lrr", spectrum, {"rank": [5], "lam": [10.0]})
    models = {"ease": build_model("ease", lam=10.0).fit(train),
              "knn": build_model("itemknn", k=5).fit(train),
              "wmf": build_model("wmf", factors=4, iterations=2).fit(train), "lrr": lrr}
    summary = {}
    profiles = {label: _profile(label, model, train) for label, model in models.items()}
    assert profiles["wmf"] is None
    figure = _write_profiles({k: v for k, v in profiles.items() if v is not None}, tmp_path,
                             summary)
    assert figure is not None and figure.stat().st_size > 0
    assert sorted(summary["profiles"]) == ["ease", "knn", "lrr"]
    for label in ("ease", "knn"):
        np.testing.assert_allclose(summary["profiles"][label],
                                   spectral_profile(models[label], spectrum), rtol=1e-12)
    np.testing.assert_allclose(summary["profiles"]["lrr"][:5], lrr.filter_, rtol=1e-12)
    assert not np.any(summary["profiles"]["lrr"][lrr.filter_.size:])

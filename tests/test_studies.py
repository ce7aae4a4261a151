"""The study presets run end to end on small synthetic data and their numbers are consistent."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from linrec.cli import config_dir
from linrec.experiment import run

SMALL_DATA = ["data.source.n_users=400", "data.source.n_items=150"]


def compose_config(*overrides: str):
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.fixture(autouse=True)
def _data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("LINREC_DATA", str(tmp_path / "cache"))


def test_sampling_study(tmp_path):
    cfg = compose_config(
        "experiment=sampling_study", *SMALL_DATA, "quiet=true",
        "~study.models", "+study.models={pop: {name: most_popular}, ease: {name: ease, lam: 50.0},"
        " knn: {name: itemknn, k: 20}}",
        "study.sample_sizes=[20,50]", "study.adaptive_n0=10", "study.adaptive_n_max=40",
        "study.repeats=4", "study.estimators=[naive,bv,mle,mn_mle]",
        "study.mappings=[linear,bound,beta@0.5,beta_p]", "study.k_max=10",
        "study.winner_ks=[5,10]", "study.mapping_ks=[1,5,10]",
    )
    run(cfg, run_dir=tmp_path / "run")
    tables = tmp_path / "run" / "tables"
    for name in ("are_n20", "are_n50", "are_adaptive", "winners", "mapping_errors",
                 "mapping_ease_n20"):
        assert (tables / f"{name}.md").exists() and (tables / f"{name}.csv").exists()
    record = json.loads((tmp_path / "run" / "study.json").read_text())
    assert record["models"] == ["pop", "ease", "knn"]
    are = record["are"]
    for model in ("pop", "ease", "knn"):
        # the naive sampled metric is not an estimator of the exact one (spec §1.3)
        assert are[f"n=20/{model}/recall/naive"]["mean"] > are[f"n=20/{model}/recall/mle"]["mean"]
    assert all(0 <= v <= 4 for v in record["winners"].values())
    mapping = (tables / "mapping_ease_n20.md").read_text()
    assert "HR@bound" in mapping and "SHR" in mapping


def test_linear_models_study(tmp_path):
    cfg = compose_config(
        "experiment=linear_models", "data=synthetic", *SMALL_DATA, "quiet=true",
        "data.split.n_valid_users=60", "data.split.n_test_users=60",
        "~study.models", "+study.models={ease: {model: ease, grid: {lam: [5.0, 50.0]}},"
        " lrr: {model: lrr, grid: {rank: [10, 20], lam: [10.0, 100.0, 1000.0]}},"
        " mf: {model: mf_closed, train_on: train_and_foldin, grid: {rank: [10], lam: [0.0, 2.0]}}}",
    )
    best = run(cfg, run_dir=tmp_path / "run")
    record = json.loads((tmp_path / "run" / "study.json").read_text())
    tables = tmp_path / "run" / "tables"
    grid = (tables / "grid_lrr.md").read_text()
    assert "rank \\ lam" in grid and "\n| 10 |" in grid and "\n| 20 |" in grid  # rows: k
    for label, fam in record["families"].items():
        values = [row["ndcg@100"] for row in fam["grid"]]
        assert fam["valid"]["ndcg@100"] == max(values), label
    assert best == max(f["valid"]["ndcg@100"] for f in record["families"].values())
    assert (tmp_path / "run" / "figures" / "spectral_profile.png").stat().st_size > 0

    # the reported test numbers are those of the selected model, recomputed independently
    from linrec.data.pipeline import prepare_data
    from linrec.eval.evaluator import evaluate_split
    from linrec.models import EASE

    split = prepare_data(record_data_config(cfg)).split
    lam = record["families"]["ease"]["best"]["lam"]
    model = EASE(lam=lam).fit(split.train)
    test = evaluate_split(model, split.test, ks=[20, 50, 100], metrics=["recall_trunc", "ndcg"],
                          seed=0, users_known=False).metrics
    for key in ("recall_trunc@20", "recall_trunc@50", "ndcg@100"):
        np.testing.assert_allclose(record["families"]["ease"]["test"][key], test[key], rtol=1e-6)


def record_data_config(cfg):
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg.data, resolve=True)


@pytest.mark.parametrize(
    "override, match",
    [
        ("study.repeats=abc", r"study.repeats='abc' must be of type int"),
        ("study.sample_sizes=[abc]", r"study.sample_sizes='abc' must be of type int"),
        ("~study.k_max", r"study: missing field\(s\) \['k_max'\]"),
        ("+study.repeat=5", r"study: unknown field\(s\) \['repeat'\]"),
        ("study.models.ease=3", r"study.models.ease=3 must be a mapping with a 'name'"),
        ("study.mappings=[linear,nope]", r"study.mappings: 'nope' is unknown"),
        ("study.mappings=[beta@x]", r"study.mappings: 'beta@x' is unknown"),
        ("study.mappings=[beta]", r"study.mappings: 'beta' is unknown"),
        ("study.models.ease.lam=-1.0", r"lam"),
    ],
)
def test_sampling_study_config_errors_come_before_any_fit(tmp_path, monkeypatch, override, match):
    """Mistyped study fields were TypeError/KeyError tracebacks, and a bad mapping or model
    parameter surfaced only after every model had been fitted and sampled."""
    from linrec.errors import ConfigError
    from linrec.models import MostPopular

    def no_fit(self, *args, **kwargs):
        raise AssertionError("a model was fitted before the config error")

    monkeypatch.setattr(MostPopular, "fit", no_fit)
    cfg = compose_config(
        "experiment=sampling_study", *SMALL_DATA, "quiet=true", "~study.models",
        "+study.models={pop: {name: most_popular}, ease: {name: ease, lam: 50.0}}", override,
    )
    with pytest.raises(ConfigError, match=match):
        run(cfg, run_dir=tmp_path / "run")


def test_linear_models_family_must_name_its_model(tmp_path):
    from linrec.errors import ConfigError

    cfg = compose_config(
        "experiment=linear_models", "data=synthetic", *SMALL_DATA, "quiet=true",
        "~study.models", "+study.models={ease: {grid: {lam: [5.0]}}}",
    )
    with pytest.raises(ConfigError, match=r"study.models.ease=.* must be a mapping with a 'model'"):
        run(cfg, run_dir=tmp_path / "run")


@pytest.mark.parametrize(("replace", "scheme"), [(True, "binomial"), (False, "hypergeometric")])
def test_sampling_study_estimators_assume_the_sampling_scheme(tmp_path, monkeypatch, replace,
                                                               scheme):
    """study.replace=false draws without replacement; the estimators used to assume the
    binomial law regardless (spec §2.2: hypergeometric)."""
    import linrec.studies.sampling_study as study_module

    seen = []
    real = study_module.estimate_samples

    def spy(*args, **kwargs):
        seen.append(kwargs["scheme"])
        return real(*args, **kwargs)

    monkeypatch.setattr(study_module, "estimate_samples", spy)
    cfg = compose_config(
        "experiment=sampling_study", *SMALL_DATA, "quiet=true", "~study.models",
        "+study.models={pop: {name: most_popular}}", "study.sample_sizes=[20]",
        "study.adaptive_n0=10", "study.adaptive_n_max=40", "study.repeats=2",
        "study.estimators=[naive,mle]", "study.mappings=[linear]", "study.k_max=10",
        "study.winner_ks=[5]", "study.mapping_ks=[1,5]", f"study.replace={str(replace).lower()}",
    )
    run(cfg, run_dir=tmp_path / "run")
    assert len(seen) == 2 and set(seen) == {scheme}  # one call for n=20, one for adaptive

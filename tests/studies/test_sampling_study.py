"""experiment=sampling_study end to end on small synthetic data: one run per model written like
any run, tables consistent with those runs, and config errors before any fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from linrec.errors import ConfigError
from linrec.experiment import run
from tests.studies.conftest import SMALL_DATA, compose_config

STUDY = ["experiment=sampling_study", *SMALL_DATA, "quiet=true", "~study.models",
         "eval.sampled.sample_sizes=[20,50]", "eval.sampled.adaptive.n0=10",
         "eval.sampled.adaptive.n_max=40", "eval.sampled.repeats=4", "eval.sampled.k_max=10",
         "eval.sampled.estimators=[naive,bv,mle,mn_mle]", "study.winner_ks=[5,10]",
         "study.mappings=[linear,bound,beta@0.5,beta_p]", "study.mapping_ks=[1,5,10]",
         "study.user_samples=[50,200]", "study.user_sampling_estimator=mn_mle"]


def test_sampling_study(tmp_path):
    cfg = compose_config(*STUDY, "+study.models={pop: {name: most_popular}, "
                                 "ease: {name: ease, lam: 50.0}, knn: {name: itemknn, k: 20}}")
    run(cfg, run_dir=tmp_path / "run")
    tables = tmp_path / "run" / "tables"
    for name in ("are_n20", "are_n50", "are_adaptive", "winners", "order", "mapping_errors",
                 "mapping_ease_n20"):
        assert (tables / f"{name}.md").exists() and (tables / f"{name}.csv").exists()
    index = json.loads((tmp_path / "run" / "study.json").read_text())
    summary = index["summary"]
    assert summary["models"] == ["pop", "ease", "knn"]
    assert index["runs"] == ["runs/ease", "runs/knn", "runs/pop"]
    assert "tables/winners.md" in index["tables"]
    are = summary["are"]
    for model in ("pop", "ease", "knn"):
        # the naive sampled metric is not an estimator of the exact one (Rendle 2019, §4)
        assert are[f"n=20/{model}/recall/naive"]["mean"] > are[f"n=20/{model}/recall/mle"]["mean"]
        # the study's table is its run's sampled block
        record = json.loads((tmp_path / "run" / "runs" / model / "results.json").read_text())
        block = record["splits"]["test"]["sampled"]["n=20"]
        assert block["protocol"]["method"] == "simulate" and block["protocol"]["repeats"] == 4
        assert are[f"n=20/{model}/recall/mle"]["mean"] == pytest.approx(
            block["estimators"]["mle"]["are"]["recall"]["mean"], rel=1e-12)
        assert record["study"] == {"name": "sampling_study", "label": model, "point": {}}
    assert all(0 <= v <= 4 for v in summary["winners"].values())
    assert summary["order"].keys() == summary["winners"].keys()
    for key, order in summary["order"].items():
        assert -1 <= order["tau"] <= 1
        # a repeat with every pair in the exact order also names the exact winner
        assert order["exact_order"] <= summary["winners"][key]
        if order["exact_order"] == 4:
            assert order["tau"] == pytest.approx(1.0, abs=1e-12)
    # every table names the split it shows (the study evaluates the test users only)
    for name in ("are_n20", "are_adaptive", "winners", "order", "mapping_errors",
                 "mapping_ease_n20"):
        assert "test split" in (tables / f"{name}.md").read_text().splitlines()[0], name
    mapping = (tables / "mapping_ease_n20.md").read_text()
    assert "HR@bound" in mapping and "SHR" in mapping


def test_the_user_sampling_table_against_a_count_over_the_drawn_users(tmp_path):
    """Each cell of the user-sampling table recomputed from the run's ranks.npz: every repeat
    draws m of the test users (the same for every model; every target of each), Recall@K over
    their targets is counted directly, and its relative error to the count over all targets is
    averaged over K = 1..10; the item columns are the ARE table's cells."""
    import numpy as np

    from linrec.eval.ranks import RankTable
    from linrec.studies import sampling_study

    cfg = compose_config(*STUDY, "+study.models={pop: {name: most_popular}, "
                                 "ease: {name: ease, lam: 50.0}}")
    run(cfg, run_dir=tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "study.json").read_text())["summary"]
    table = (tmp_path / "run" / "tables" / "user_sampling.md").read_text()
    assert "test split" in table.splitlines()[0] and "mn_mle" in table.splitlines()[0]
    draws = {m: [] for m in (50, 200)}
    for repeat in range(4):
        rng = np.random.default_rng([cfg.seed, sampling_study._USER_SAMPLING_SEED_TAG, repeat])
        for m in (50, 200):
            draws[m].append(set(rng.choice(400, size=m, replace=False).tolist()))
    for model in ("pop", "ease"):
        ranks = RankTable.load_npz(tmp_path / "run" / "runs" / model / "ranks.npz")
        users, global_ranks = np.asarray(ranks.rows), np.asarray(ranks.ranks)
        truth = [np.mean(global_ranks <= k) for k in range(1, 11)]
        for m in (50, 200):
            errors = []
            for chosen in draws[m]:
                kept = [r for u, r in zip(users, global_ranks, strict=True) if u in chosen]
                recall = [sum(r <= k for r in kept) / len(kept) for k in range(1, 11)]
                errors.append(100 * np.mean([abs(a - b) / b if b > 0 else 0.0
                                             for a, b in zip(recall, truth, strict=True)]))
            cell = summary["user_sampling"][f"{model}/recall/users={m}"]
            assert cell["mean"] == pytest.approx(np.mean(errors), rel=1e-9)
            assert cell["std"] == pytest.approx(np.std(errors), rel=1e-9, abs=1e-12)
        assert summary["user_sampling"][f"{model}/ndcg/item n=20"] == \
            summary["are"][f"n=20/{model}/ndcg/mn_mle"]


def test_study_and_run_draw_the_same_simulated_samples(tmp_path):
    """A model's study run equals a plain run of that model with the study's eval block: the
    adaptive simulation is seeded the same way everywhere (it used to differ)."""
    cfg = compose_config(*STUDY, "+study.models={ease: {name: ease, lam: 50.0}}")
    run(cfg, run_dir=tmp_path / "study")
    plain = compose_config(*SMALL_DATA, "quiet=true", "model=ease", "model.lam=50.0",
                           "data/split=loo", "data.split.valid=false", "eval.splits=[test]",
                           "eval.sampled.method=simulate", *STUDY[5:10],
                           "eval.sampled.estimators=[naive,bv,mle,mn_mle]")
    run(plain, run_dir=tmp_path / "plain")
    a = json.loads((tmp_path / "study" / "runs" / "ease" / "results.json").read_text())
    b = json.loads((tmp_path / "plain" / "results.json").read_text())
    for setting in ("n=20", "n=50", "adaptive"):
        assert (a["splits"]["test"]["sampled"][setting]["estimators"]
                == b["splits"]["test"]["sampled"][setting]["estimators"])


def test_the_study_of_saved_runs_is_the_study_that_trained_them(tmp_path):
    """study.runs reads the runs' ranks.npz: the tables equal those of the study that trained
    the same models; runs of another split are refused."""
    models = "+study.models={pop: {name: most_popular}, ease: {name: ease, lam: 50.0}}"
    run(compose_config(*STUDY, models), run_dir=tmp_path / "trained")
    saved = tmp_path / "trained" / "runs"
    run(compose_config(*STUDY, f"study.runs=[{saved}]"), run_dir=tmp_path / "saved")
    for table in ("are_n20", "are_adaptive", "winners", "order", "mapping_errors",
                  "mapping_ease_n50"):  # "order": τ does not depend on the order of the runs
        rows = [sorted((tmp_path / d / "tables" / f"{table}.csv").read_text().splitlines())
                for d in ("saved", "trained")]  # the runs come in another order
        assert rows[0] == rows[1], table
    index = json.loads((tmp_path / "saved" / "study.json").read_text())
    assert index["summary"]["models"] == ["ease", "pop"] and index["runs"] == []
    assert index["summary"]["saved_runs"]["ease"] == str(saved / "ease")
    assert index["dataset"]["n_items"] == 150
    # runs below a directory are labelled by their path under it; table names stay flat
    run(compose_config(*STUDY, f"study.runs=[{tmp_path / 'trained'}]"), run_dir=tmp_path / "deep")
    assert (tmp_path / "deep" / "tables" / "mapping_runs__ease_n20.md").is_file()
    # one run given by itself is labelled by its name
    run(compose_config(*STUDY, f"study.runs=[{saved / 'ease'}]"), run_dir=tmp_path / "one")
    assert json.loads((tmp_path / "one" / "study.json").read_text())["summary"]["models"] == \
        ["ease"]
    # label:path names a run, and prefixes the runs below a directory
    run(compose_config(*STUDY, f"study.runs=[EASE-50:{saved / 'ease'},all:{saved}]"),
        run_dir=tmp_path / "labelled")
    labelled = json.loads((tmp_path / "labelled" / "study.json").read_text())["summary"]
    assert labelled["models"] == ["EASE-50", "all/ease", "all/pop"]
    assert labelled["saved_runs"]["EASE-50"] == str(saved / "ease")
    with pytest.raises(ConfigError, match=r"share the labels \['ease'\]"):
        run(compose_config(*STUDY, f"study.runs=[ease:{saved / 'pop'},{saved / 'ease'}]"),
            run_dir=tmp_path / "twice")
    other = compose_config(*STUDY[:1], "data.source.n_users=300", "data.source.n_items=150",
                           *STUDY[3:], "+study.models={pop: {name: most_popular}}")
    run(other, run_dir=tmp_path / "other")
    with pytest.raises(ConfigError, match="other held-out items"):
        run(compose_config(*STUDY, f"study.runs=[{saved / 'ease'},{tmp_path}/other/runs/pop]"),
            run_dir=tmp_path / "mixed")
    with pytest.raises(ConfigError, match="method=simulate"):
        run(compose_config(*STUDY, f"study.runs=[{saved}]", "eval.sampled.method=sample"),
            run_dir=tmp_path / "sample")
    with pytest.raises(ConfigError, match="no run with a ranks.npz"):
        run(compose_config(*STUDY, f"study.runs=[{tmp_path / 'saved'}]"),
            run_dir=tmp_path / "none")


def test_a_saved_run_entry_is_a_path_or_a_labelled_path(tmp_path, monkeypatch):
    """`label:path` splits at the first colon when the label is a plain word and the entry is
    not itself an existing path (a directory whose name holds a colon)."""
    from linrec.studies.sampling_study import _labelled_path

    assert _labelled_path("runs/ease") == (None, Path("runs/ease"))
    assert _labelled_path("EASE-100:runs/a:b") == ("EASE-100", Path("runs/a:b"))
    assert _labelled_path("two words:runs/x") == (None, Path("two words:runs/x"))
    assert _labelled_path("ease:") == (None, Path("ease:"))
    monkeypatch.chdir(tmp_path)
    Path("ease:1").mkdir()
    assert _labelled_path("ease:1") == (None, Path("ease:1"))
    assert _labelled_path("ease:2") == ("ease", Path("2"))
    assert _labelled_path("x:ease:1") == ("x", Path("ease:1"))


@pytest.mark.parametrize(
    "override, match",
    [
        ("study.models.ease=3", r"study.models.ease=3 must be a mapping with a 'name'"),
        ("study.mappings=[linear,nope]", r"study.mappings: 'nope' is unknown"),
        ("study.mappings=[beta@x]", r"study.mappings: 'beta@x' is unknown"),
        ("study.mappings=[beta]", r"study.mappings: 'beta' is unknown"),
        ("study.models.ease.lam=-1.0", r"ease.lam=-1.0 is out of range"),
        ("eval.sampled.enabled=false", r"needs eval.sampled.enabled=true"),
        ("study.user_sampling_estimator=mes",
         r"study.user_sampling_estimator='mes' is not among eval.sampled.estimators"),
    ],
)
def test_sampling_study_config_errors_come_before_any_fit(tmp_path, monkeypatch, override, match):
    """A bad mapping or model parameter used to surface only after every model had been fitted
    and sampled."""
    from linrec.errors import ConfigError
    from linrec.models import MostPopular

    def no_fit(self, *args, **kwargs):
        raise AssertionError("a model was fitted before the config error")

    monkeypatch.setattr(MostPopular, "fit", no_fit)
    cfg = compose_config(*STUDY, "+study.models={pop: {name: most_popular}, "
                                 "ease: {name: ease, lam: 50.0}}", override)
    with pytest.raises(ConfigError, match=match):
        run(cfg, run_dir=tmp_path / "run")


@pytest.mark.parametrize(("replace", "scheme"), [(True, "binomial"), (False, "hypergeometric")])
def test_sampling_study_estimators_assume_the_sampling_scheme(tmp_path, monkeypatch, replace,
                                                               scheme):
    """eval.sampled.replace=false draws without replacement; the estimators must assume the
    hypergeometric law (Li et al. 2020), not the binomial one."""
    import linrec.eval.sampled_block as block_module

    seen = []
    real = block_module.estimate_samples

    def spy(*args, **kwargs):
        seen.append(kwargs["scheme"])
        return real(*args, **kwargs)

    monkeypatch.setattr(block_module, "estimate_samples", spy)
    cfg = compose_config(*STUDY, "+study.models={pop: {name: most_popular}}",
                         "eval.sampled.sample_sizes=[20]", "eval.sampled.estimators=[naive,mle]",
                         "study.user_sampling_estimator=mle",
                         f"eval.sampled.replace={str(replace).lower()}")
    run(cfg, run_dir=tmp_path / "run")
    assert len(seen) == 2 and set(seen) == {scheme}  # one call for n=20, one for adaptive

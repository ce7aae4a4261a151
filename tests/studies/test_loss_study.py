"""experiment=loss_study end to end on two small synthetic datasets: every (dataset, loss) is a
run with its training record, and the Table 12 layout (values in %, RI% of each debiased loss
and of MINE / MINE+ over InfoNCE) agrees with the runs' own results.json."""

from __future__ import annotations

import json

import pytest

from linrec.experiment import run
from tests.conftest import compose_config

DATASET = ("{{source: {{name: synthetic, n_users: 200, n_items: 80, mean_user_interactions: 12.0,"
           " seed: {seed}}}, split: {{kind: holdout, valid_fraction: 0.15}}}}")


@pytest.mark.slow
def test_loss_study_table_matches_its_runs(tmp_path):
    cfg = compose_config(
        "experiment=loss_study", "quiet=true", "model.epochs=2", "model.batch_size=256",
        "model.sampling.n_negatives=20", "model.sampling.n_positives=4",
        "~study.datasets",
        f"+study.datasets={{small: {DATASET.format(seed=1)}, other: {DATASET.format(seed=2)}}}",
    )
    run(cfg, run_dir=tmp_path / "run")
    root = tmp_path / "run"
    losses = ["ccl", "debiased_ccl", "mse", "debiased_mse", "infonce", "debiased_infonce",
              "mine", "mine_plus"]
    results, selections = {}, {}
    for ds in ("small", "other"):
        for loss in losses:
            record = json.loads((root / "runs" / ds / loss / "results.json").read_text())
            # each results.json describes its own run: its loss and its dataset
            assert record["model"] == "mf" and record["config"]["model"]["loss"]["name"] == loss
            assert record["config"]["data"]["source"]["seed"] == (1 if ds == "small" else 2)
            assert record["study"]["point"] == {"dataset": ds, "loss": loss}
            assert len(record["training"]["epochs"]) == 2
            assert record["training"]["selected_on"] == "valid"
            results[(ds, loss)] = record["splits"]["test"]["exact"]
            assert record["selection"]["metric"] == "recall@20"
            assert record["selection"]["split"] == "valid"
            selections[(ds, loss)] = record["selection"]["value"]
    table = (root / "tables" / "table12.csv").read_text().splitlines()
    header = table[0].split(",")
    rows = {(r.split(",")[0], r.split(",")[1]): dict(zip(header, r.split(","), strict=True))
            for r in table[1:]}
    assert header[-1] == "Average RI%"
    assert "test split metrics" in (root / "tables" / "table12.md").read_text().splitlines()[0]
    # next to the test metrics, the validation value each run was selected on (in %)
    for (ds, loss), value in selections.items():
        name, row = {"ccl": ("CCL", "biased"), "debiased_ccl": ("CCL", "debiased"),
                     "mse": ("MSE", "biased"), "debiased_mse": ("MSE", "debiased"),
                     "infonce": ("InfoNCE", "biased"), "debiased_infonce": ("InfoNCE", "debiased"),
                     "mine": ("MINE", "—"), "mine_plus": ("MINE+", "—")}[loss]
        assert float(rows[(name, row)][f"{ds} recall@20 (valid)"]) == pytest.approx(
            100 * value, rel=1e-12)
    assert rows[("CCL", "RI%")]["small recall@20 (valid)"] == ""

    def cell(loss, ds, metric):
        return 100 * results[(ds, loss)][metric]

    for name, biased, debiased in (("CCL", "ccl", "debiased_ccl"), ("MSE", "mse", "debiased_mse"),
                                   ("InfoNCE", "infonce", "debiased_infonce")):
        ris = []
        for ds in ("small", "other"):
            for metric in ("recall@20", "ndcg@20"):
                column = f"{ds} {metric}"
                assert float(rows[(name, "biased")][column]) == pytest.approx(
                    cell(biased, ds, metric), abs=5e-5)
                assert float(rows[(name, "debiased")][column]) == pytest.approx(
                    cell(debiased, ds, metric), abs=5e-5)
                ri = 100 * (cell(debiased, ds, metric) / cell(biased, ds, metric) - 1)
                assert float(rows[(name, "RI%")][column].rstrip("%")) == pytest.approx(
                    ri, abs=5e-3)
                ris.append(ri)
        assert float(rows[(name, "RI%")]["Average RI%"].rstrip("%")) == pytest.approx(
            sum(ris) / len(ris), abs=5e-3)
    for name, loss in (("MINE", "mine"), ("MINE+", "mine_plus")):
        ri = 100 * (cell(loss, "small", "ndcg@20") / cell("infonce", "small", "ndcg@20") - 1)
        assert float(rows[(name, "RI% (w.r.t. infonce)")]["small ndcg@20"].rstrip("%")) == \
            pytest.approx(ri, abs=5e-3)
    index = json.loads((root / "study.json").read_text())
    assert set(index["dataset"]) == {"small", "other"}


@pytest.mark.parametrize("dataset, preset", [
    (dataset, f"mf_{loss}_{dataset.replace('-', '_')}")
    for dataset in ("yelp2018", "gowalla", "amazon-book") for loss in ("mine_plus", "debiased_ccl")
])
def test_each_dataset_trains_with_its_published_settings(dataset, preset):
    """Tables 19 and 20 publish MINE+ and debiased CCL settings per dataset: the study's run of
    that (dataset, loss) has the model config of the one-run preset for it."""
    from linrec.config import run_config
    from linrec.studies.loss_study import _model_configs

    study = run_config(compose_config("experiment=loss_study"))
    single = run_config(compose_config(f"experiment={preset}")).model
    label = single.loss.name
    trained = _model_configs(study, dataset)[label]
    assert trained.loss == single.loss
    for field in ("similarity", "temperature", "reg", "sampling"):
        assert getattr(trained, field) == getattr(single, field), field
    others = {_model_configs(study, other)[label].to_dict()["loss"]["negative_weight"]
              for other in ("yelp2018", "gowalla", "amazon-book")}
    assert len(others) > 1  # the settings do differ between datasets


def test_per_dataset_settings_name_losses_of_the_study():
    from linrec.config import run_config
    from linrec.errors import ConfigError

    with pytest.raises(ConfigError, match=r"study.per_dataset.gowalla: \['mine_pluss'\] are not"):
        run_config(compose_config("experiment=loss_study",
                                  "+study.per_dataset.gowalla.mine_pluss.temperature=0.5"))


#: the dissertation's Table 19 (MINE+: λ, t, L2, N) and Table 20 (debiased CCL: λ, ε, L2, N, M)
TABLE_19 = {"yelp2018": (1.1, 0.5, 1e-8, 800), "gowalla": (1.2, 0.4, 1e-8, 800),
            "amazon_book": (1.1, 0.4, 1e-8, 800)}
TABLE_20 = {"yelp2018": (0.4, 0.9, 1e-9, 800, 10), "gowalla": (0.7, 0.9, 1e-9, 800, 20),
            "amazon_book": (0.6, 0.4, 1e-9, 800, 50)}


@pytest.mark.parametrize("dataset", sorted(TABLE_19))
def test_the_per_dataset_presets_are_tables_19_and_20(dataset):
    from linrec.config import run_config

    mine = run_config(compose_config(f"experiment=mf_mine_plus_{dataset}")).model
    assert (mine.loss.name, mine.similarity) == ("mine_plus", "cosine")
    assert (mine.loss.negative_weight, mine.temperature, mine.reg,
            mine.sampling.n_negatives) == TABLE_19[dataset]
    ccl = run_config(compose_config(f"experiment=mf_debiased_ccl_{dataset}")).model
    assert (ccl.loss.name, ccl.loss.reduction) == ("debiased_ccl", "sum")
    assert (ccl.loss.negative_weight, ccl.loss.margin, ccl.reg, ccl.sampling.n_negatives,
            ccl.sampling.n_positives) == TABLE_20[dataset]
    for model in (mine, ccl):  # the schedule the presets state
        assert (model.lr_factor, model.lr_patience, model.min_lr, model.stop_patience) == \
            (0.5, 0, 1e-6, 0)


def _documented(text: str) -> list[str]:
    """The arguments of the first `linrec experiment=loss_study …` command in `text` (a line
    ending in a backslash continues it; a leading `#` of a YAML comment is dropped)."""
    import shlex

    lines = [line.lstrip("#").strip() for line in text.splitlines()]
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("linrec experiment=loss_study"))
    command = ""
    for line in lines[start:]:
        command += " " + line.split("  #")[0].rstrip("\\").strip()
        if not line.endswith("\\"):
            break
    return shlex.split(command)[1:]


@pytest.mark.parametrize("where", ["docs/guide.md", "conf/experiment/loss_study.yaml"])
def test_the_documented_command_sets_the_three_datasets_paths(where):
    """`study.datasets.<d>.path=…` as the docs write it (no `+`), and the study's datasets are
    the preset's three, not a schema default merged in."""
    from pathlib import Path

    from linrec.config import run_config

    root = Path(__file__).resolve().parents[2]
    args = _documented((root / where).read_text())
    study = run_config(compose_config(*args)).study
    assert sorted(study.datasets) == ["amazon-book", "gowalla", "yelp2018"]
    paths = {a.split("=")[0].split(".")[2]: a.split("=")[1] for a in args if ".path=" in a}
    assert paths and all(study.datasets[d]["path"] == p for d, p in paths.items())


def _gowalla_commands() -> tuple[dict[str, list[str]], list[str]]:
    """From experiments/README.md's real-data section: loss label -> the arguments of the
    command marked `# Table 12: <label>` (a swept value at its first point, hydra.* dropped),
    and the arguments of its `linrec experiment=loss_study` command."""
    import re

    from linrec.cli import _job_overrides
    from tests.documented import ROOT, bash_commands, markdown_blocks

    page = ROOT / "experiments" / "README.md"
    lines = page.read_text().splitlines()
    first = lines.index("## Real data: the LightGCN Gowalla split") + 1
    last = next(i for i in range(first, len(lines)) if lines[i].startswith("## ")) + 1
    variables: dict[str, str] = {}
    rows: dict[str, list[str]] = {}
    study: list[str] = []
    for block in markdown_blocks(page):
        if block.language != "bash" or not first <= block.line <= last:
            continue
        for command in bash_commands(block, variables):
            tag = re.search(r"# .*Table 12: (\w+)", command.shown)
            is_study = command.words[:2] == ["linrec", "experiment=loss_study"]
            if not (tag or is_study):
                continue
            args = _job_overrides([a for a in command.words[1:]  # a sweep's first job
                                   if a != "-m" and not a.startswith("hydra.")])[0]
            if is_study:
                study = args
            else:
                rows[tag[1]] = args
    return rows, study


def test_the_readme_column_command_trains_each_loss_as_its_row_does():
    """One command per number: the README's loss_study command trains every loss of
    the Table-12 column with the model config and split of the command its row was run with."""
    from linrec.config import run_config
    from linrec.studies.loss_study import _model_configs

    rows, study_args = _gowalla_commands()
    assert study_args, "no `linrec experiment=loss_study` command in the real-data section"
    study = run_config(compose_config(*study_args))
    assert list(study.study.datasets) == ["gowalla"]
    trained = _model_configs(study, "gowalla")
    assert sorted(rows) == sorted(trained)  # every loss of the study has its row's command
    split = study.study.datasets["gowalla"]["split"]
    for label, args in rows.items():
        single = run_config(compose_config(*args))
        assert trained[label].to_dict() == single.model.to_dict(), label
        assert split["valid_fraction"] == single.data.split.valid_fraction, label
        # the same metrics and selection (which splits are reported changes no number)
        assert {**study.eval.to_dict(), "splits": None} == \
            {**single.eval.to_dict(), "splits": None}, label

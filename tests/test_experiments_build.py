"""experiments/build.py: the results tables of experiments/README.md are what the committed run
records give (`--check`), and a changed number in one record makes the check fail, naming the
table; experiments/record.py writes a record from a run directory with the command that
regenerates it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "experiments" / "build.py"
RECORD = ROOT / "experiments" / "record.py"


def _build(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BUILD), *args], capture_output=True, text=True,
                          timeout=120)


def test_the_readme_tables_are_what_the_records_give():
    done = _build("--check")
    assert done.returncode == 0, done.stderr


def test_one_changed_number_in_one_record_fails_the_check(tmp_path):
    records = tmp_path / "records"
    shutil.copytree(ROOT / "experiments" / "records", records)
    readme = tmp_path / "README.md"
    shutil.copy2(ROOT / "experiments" / "README.md", readme)
    assert _build("--check", "--records", str(records), "--readme", str(readme)).returncode == 0
    path = sorted((records / "ch3" / "ease").glob("*.json"))[0]
    record = json.loads(path.read_text())
    record["splits"]["test"]["exact"]["recall@20"] += 1e-4
    path.write_text(json.dumps(record, indent=1))
    done = _build("--check", "--records", str(records), "--readme", str(readme))
    assert done.returncode == 1
    assert "differs from its records in table(s)" in done.stderr and "ch3-gowalla" in done.stderr


def test_a_record_from_a_run_directory_holds_its_command(tmp_path):
    from tests.conftest import run_command

    done = run_command(tmp_path, "data.source.n_users=300", "data.source.n_items=100",
                       "eval.sampled.enabled=false", "model.lam=50", "hydra.run.dir=run")
    assert done.returncode == 0, done.stderr
    subprocess.run([sys.executable, str(RECORD), str(tmp_path / "run"), "--as", "t/ease",
                    "--root", str(tmp_path / "records")], check=True, capture_output=True,
                   timeout=120)
    record = json.loads((tmp_path / "records" / "t" / "ease.json").read_text())
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["command"] == ("linrec data.source.n_users=300 data.source.n_items=100 "
                                 "eval.sampled.enabled=false model.lam=50")
    assert record["splits"]["test"]["exact"] == results["splits"]["test"]["exact"]
    assert record["environment"]["cpu"] == results["environment"]["cpu"]
    assert set(record) == {"format", "name", "command", "model", "dataset", "seed", "config",
                           "selection", "splits", "timings", "environment"}  # no ranks, no model
    assert set(record["splits"]["test"]) == {"exact", "n_users"}


def _build_module():
    """experiments/build.py as a module (registered: its dataclasses need it)."""
    import importlib.util

    sys.path.insert(0, str(ROOT / "experiments"))  # build.py imports its sibling records.py
    spec = importlib.util.spec_from_file_location("experiments_build", BUILD)
    build = sys.modules["experiments_build"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return build


def test_a_grid_that_is_not_full_is_given_as_one_command_per_part():
    """p in {0.1, 0.5} at λ = 30 and 100, and p = 0.8 at λ = 100 only: two sweeps, none of
    which runs a point that was not recorded."""
    build = _build_module()
    points = [(0.1, 30), (0.5, 30), (0.1, 100), (0.5, 100), (0.8, 100)]
    records = {f"r{i}": {"command": f"linrec model=edlae model.p={p} model.lam={lam}"}
               for i, (p, lam) in enumerate(points)}
    assert build.sweep_commands(records) == [
        "linrec -m model=edlae model.p=0.1,0.5 model.lam=30",
        "linrec -m model=edlae model.p=0.1,0.5,0.8 model.lam=100"]
    full = {name: r for name, r in records.items() if "0.8" not in r["command"]}
    assert build.sweep_commands(full) == ["linrec -m model=edlae model.p=0.1,0.5 "
                                          "model.lam=30,100"]


def test_a_per_user_comparison_gives_the_spread_only_of_the_settings_it_compared(tmp_path):
    """The findings' spread comes from ch3/compare/<best>_vs_<second> only when that record
    compared the two selected settings; a comparison of another setting is said to be one."""
    import tomllib

    build = _build_module()
    records = tmp_path / "records"
    shutil.copytree(ROOT / "experiments" / "records", records)
    readme = (ROOT / "experiments" / "README.md").read_text()

    def findings() -> str:
        context = build.Context(build.load_records(records),
                                tomllib.loads(build.PUBLISHED.read_text()))
        text = build.build_text(readme, context, "README.md")
        return text[text.index("<!-- table: findings -->"):text.index("## What has not")]

    context = build.Context(build.load_records(records), {})
    best = {family: build.selected(build.ch3_group(context, family))
            for family in build.CH3_FAMILIES}
    first, second = sorted((f for f in best if best[f]), reverse=True,
                           key=lambda f: build.metric(best[f][1], "test", "recall@20"))[:2]
    # the per-user record of the first two, or another pair's standing in for it
    path = records / "ch3" / "compare" / f"{first}_vs_{second}.json"
    source = path if path.exists() else sorted((records / "ch3" / "compare").glob("*.json"))[0]
    comparison = json.loads(source.read_text())
    comparison["name"] = f"ch3/compare/{first}_vs_{second}"
    for side, family in (("a", first), ("b", second)):  # the settings the selection chose
        comparison["models"][side] = dict(best[family][1]["config"]["model"])
    path.write_text(json.dumps(comparison))
    assert "95 % interval over 29 858 users" in findings()
    # a setting the selection did not choose
    key = next(k for k, v in comparison["models"]["a"].items()
               if isinstance(v, float) and k != "seed")
    comparison["models"]["a"][key] += 1.0
    path.write_text(json.dumps(comparison))
    assert "95 % interval over" not in findings()
    assert "not measured for these settings (the per-user record compares others)" in findings()


def test_a_null_setting_of_a_grid_reads_null_in_its_tables_and_heat_map(tmp_path):
    """Closed-form MF's λ′ = null (σ_k at the cut) beside numbers: the grid lists it after them,
    the settings say "null", and the heat map has a cell for it."""
    build = _build_module()
    points = [(1000, None, 0.17), (1000, 4, 0.16), (2000, None, 0.19), (2000, 4, 0.18)]
    records = {f"ch3/mf_closed/r{i}": {
        "config": {"model": {"name": "mf_closed", "rank": rank, "lam": lam}},
        "splits": {"valid": {"exact": {"recall@20": value}}}}
        for i, (rank, lam, value) in enumerate(points)}
    assert build.swept(records) == {"rank": [1000, 2000], "lam": [4, "null"]}
    assert build.setting(records["ch3/mf_closed/r2"], ["rank", "lam"]) == "rank = 2000, lam = null"
    [figure] = build.heat_maps(build.Context(records, {}), out=tmp_path)
    assert figure.name == "ch3_mf_closed.png" and figure.stat().st_size > 0


def test_a_selection_at_the_end_of_a_grid_says_so():
    """A grid of three or more numbers whose selected value is its smallest or largest is named
    (the optimum may lie beyond it); two-value grids, inner points and text values are not."""
    build = _build_module()
    points = [(500, 100, "a", 0.1), (1000, 300, "a", 0.2), (2000, 1000, "b", 0.3),
              (2000, 100, "b", 0.25)]
    records = {f"ch3/lrr/r{i}": {
        "config": {"model": {"name": "lrr", "rank": rank, "lam": lam, "kind": kind}},
        "splits": {"valid": {"exact": {"recall@20": value}}}}
        for i, (rank, lam, kind, value) in enumerate(points)}
    grid = build.swept(records)
    assert grid == {"rank": [500, 1000, 2000], "lam": [100, 300, 1000], "kind": ["a", "b"]}
    assert build.grid_edges(records["ch3/lrr/r2"], grid) == \
        "; rank at the grid's top; lam at the grid's top"
    assert build.grid_edges(records["ch3/lrr/r3"], grid) == \
        "; rank at the grid's top; lam at the grid's bottom"
    assert build.grid_edges(records["ch3/lrr/r1"], grid) == ""
    assert build.grid_edges(records["ch3/lrr/r1"], {"lam": [300, 1000]}) == ""


def test_the_pruning_table_gives_each_search_as_a_share_of_the_unpruned_one():
    """Epochs and wall time of the pruned search as a share of the unpruned search's (computed
    here: 45 / 120 epochs, 900 / 2 400 s), and both commands below the table."""
    build = _build_module()
    environment = {"cpu": "AMD EPYC", "threads": 1}
    records = {
        "pruning/none": {"complete": 12, "pruned": 0, "epochs": 120, "seconds": 2400.0,
                         "best_value": 0.1234, "environment": environment,
                         "command": "linrec -m hydra.sweeper.pruner=none model=mf"},
        "pruning/median": {"complete": 4, "pruned": 8, "epochs": 45, "seconds": 900.0,
                           "best_value": 0.1201, "environment": environment,
                           "command": "linrec -m hydra.sweeper.pruner=median model=mf"}}
    text = build.pruning(build.Context(records, {}))
    rows = [line for line in text.splitlines() if line.startswith("| none") or
            line.startswith("| median")]
    assert rows == ["| none | 12 / 0 | 120 | 40.0 min | 0.12340 | AMD EPYC, 1 thread(s) |",
                    "| median | 4 / 8 | 45 (38%) | 15.0 min (38%) | 0.12010 | AMD EPYC, "
                    "1 thread(s) |"]
    assert text.endswith("```bash\nlinrec -m hydra.sweeper.pruner=none model=mf\n"
                         "linrec -m hydra.sweeper.pruner=median model=mf\n```\n")
    assert build.pruning(build.Context({}, {})).startswith("Not recorded yet")


def test_a_search_record_counts_the_epochs_its_jobs_trained(tmp_path):
    """A complete job's training log (10 epochs) and a pruned job's validation passes (3)
    times its eval_every (2): 16 epochs, whether or not the study holds reported passes."""
    import importlib.util

    sys.path.insert(0, str(ROOT / "experiments"))
    spec = importlib.util.spec_from_file_location("experiments_record", RECORD)
    record = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(record)
    complete, pruned = tmp_path / "loss=ccl", tmp_path / "loss=mine"
    for job in (complete, pruned):
        (job / ".hydra").mkdir(parents=True)
    (complete / "results.json").write_text(json.dumps(
        {"training": {"epochs": [{"epoch": e} for e in range(1, 11)]}}))
    (pruned / "PRUNED").write_text("pruned by the Optuna sweeper after validation pass 3 "
                                   "(value 0.10000)\n")
    (pruned / ".hydra" / "config.yaml").write_text("model:\n  eval_every: 2\n")
    (tmp_path / "superseded" / "old").mkdir(parents=True)
    assert record.epochs_trained(tmp_path) == 16


def test_a_finding_over_a_seeded_model_says_how_many_seeds_stand_behind_it():
    """The closed-form fits are deterministic; when a seeded model (MF-CCL) is among the two
    compared, the finding counts the seeds of its selected setting instead."""
    build = _build_module()
    records = {name: r for name, r in build.load_records(ROOT / "experiments" / "records").items()
               if not name.startswith("ch3/mf_ccl/")}
    assert "deterministic fits" in build.findings(build.Context(records, {}))
    ease = next(r for name, r in records.items() if name.startswith("ch3/ease/"))
    for seed, recall in ((0, 0.30), (1, 0.29)):
        record = json.loads(json.dumps(ease))
        record["config"]["model"] = {"name": "mf", "dim": 64, "seed": seed}
        record["seed"] = seed
        record["splits"]["test"]["exact"]["recall@20"] = recall
        record["splits"]["valid"]["exact"]["recall@20"] = recall  # seed 0 is selected
        records[f"ch3/mf_ccl/seed={seed}"] = record
    text = build.findings(build.Context(records, {}))
    assert "MF-CCL (SimpleX's settings) (test Recall@20 0.3000)" in text
    assert "2 seeds of MF-CCL (SimpleX's settings) (the others deterministic)" in text


def test_a_chapter_4_direction_needs_three_seeds_a_side_and_a_separated_gap():
    """MSE against debiased MSE from ch4/ records: one seed a side is "not shown" whatever the
    gap; three a side with the gap far outside the seeds' spread is a direction, with Welch's p
    as the formula gives it; a gap inside the spread is "not shown"; Table 12's gap beside."""
    import math

    from scipy import special

    build = _build_module()
    template = next(r for name, r in build.load_records(ROOT / "experiments" / "records").items()
                    if name.startswith("ch3/ease/"))

    def records(mse, debiased):
        found = {}
        for loss, values in (("mse", mse), ("debiased_mse", debiased)):
            for seed, value in enumerate(values):
                record = json.loads(json.dumps(template))
                record["splits"]["test"]["exact"]["recall@20"] = value
                found[f"ch4/{loss}/seed={seed}"] = record
        return found

    published = {"table12_gowalla": {"mse": {"recall20": 0.1427, "ndcg20": 0.1},
                                     "debiased_mse": {"recall20": 0.1498, "ndcg20": 0.1}}}

    def row(mse, debiased):
        rows = build.ch4_directions(build.Context(records(mse, debiased), published))
        assert len(rows) == 1 and rows[0][0].startswith("Does debiasing MSE")
        return rows[0]

    one = row([0.138], [0.150])
    assert one[1] == "not shown: 1 seed(s) on a side, 3 needed"
    assert one[2] == "+0.0120 Recall@20 (+8.7%); Table 12: +0.0071 (+5.0%)"
    assert one[3:6] == ["std – (one seed) / – (one seed)", "1 and 1", "–"]
    lower = row([0.1380, 0.1382, 0.1378], [0.1340])
    assert lower[1] == "not shown: 1 seed(s) on a side, 3 needed"
    assert lower[2].startswith("−0.0040 Recall@20 (−2.9%)")
    assert lower[3] == "std 0.00020 / – (one seed)"

    a, b = [0.1380, 0.1382, 0.1378], [0.1340, 0.1343, 0.1338]
    separated = row(a, b)
    assert separated[1] == "no: it lowers it"
    # Welch's t and its Satterthwaite degrees of freedom, written out
    va, vb = (sum((x - sum(v) / 3) ** 2 for x in v) / 2 / 3 for v in (a, b))
    t = (sum(b) / 3 - sum(a) / 3) / math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 2)
    p = 2 * special.stdtr(dof, -abs(t))
    assert separated[5] == f"Welch t over seeds {build.p_value(p)}"
    assert separated[3] == "std 0.00020 / 0.00025" and separated[4] == "3 and 3"

    within = row([0.1380, 0.1390, 0.1370], [0.1385, 0.1372, 0.1391])
    assert within[1] == "not shown: the gap lies within the seeds' spread"
    assert build.ch4_directions(build.Context(records([0.138], []), published)) == []

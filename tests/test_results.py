"""linrec.results: run records, provenance, collecting runs and studies into one table."""

from __future__ import annotations

import json
import subprocess

from linrec.cli import report_main
from linrec.results import collect, environment_info, source_revision, write_json_atomic


def test_provenance_names_linrec_its_commit_and_the_libraries():
    env = environment_info()
    assert env["linrec"]["version"]
    assert {"numpy", "scipy", "torch", "implicit", "hydra-core"} <= set(env["libraries"])
    revision = source_revision()
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    if (root / ".git").exists():
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        assert revision["commit"] == head and isinstance(revision["dirty"], bool)


def test_report_on_a_results_file_writes_beside_it(tmp_path):
    """`linrec-report run/results.json` used to write into run/results.json/ (a traceback)."""
    record = {"model": "ease", "dataset": {"name": "toy"},
              "splits": {"test": {"exact": {"ndcg@10": 0.25}}}, "timings": {"fit": 1.0}}
    results = write_json_atomic(tmp_path / "run" / "results.json", record)
    assert report_main([str(results)]) == 0
    csv = (tmp_path / "run" / "report.csv").read_text().splitlines()
    assert csv[0].split(",")[-3:] == ["model", "ndcg@10", "fit_s"] and csv[1].endswith(",0.25,1.0")


def test_collect_reads_the_runs_of_a_study_and_the_report_its_tables(tmp_path):
    study = tmp_path / "study"
    for point, value in (("lam=1", 0.1), ("lam=2", 0.2)):
        write_json_atomic(study / "runs" / "ease" / point / "results.json", {
            "model": "ease", "dataset": {"name": "toy"},
            "splits": {"valid": {"exact": {"ndcg@100": value}}},
            "study": {"name": "linear_models", "label": "ease", "point": {"lam": value * 10}}})
    (study / "tables").mkdir()
    (study / "tables" / "main.md").write_text("### main\n\n| model |\n|---|\n| ease |\n")
    write_json_atomic(study / "study.json", {"study": {"name": "linear_models"},
                                             "tables": ["tables/main.md"]})
    columns, rows = collect([study], split="valid")
    assert [r["lam"] for r in rows] == [1.0, 2.0] and {"study", "label", "lam"} <= set(columns)
    assert [r["ndcg@100"] for r in rows] == [0.1, 0.2]
    assert report_main([str(study), "--split", "valid"]) == 0
    md = (study / "report.md").read_text()
    assert "## Study linear_models" in md and "### main" in md
    assert json.loads((study / "study.json").read_text())["tables"] == ["tables/main.md"]

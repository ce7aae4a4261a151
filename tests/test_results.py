"""linrec.results: run records and provenance; linrec-report on a lone results.json and on a
study's runs and tables."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from importlib.metadata import version

import numpy as np
import pytest

from linrec.cli import report_main
from linrec.results import (
    environment_info,
    imported_distributions,
    source_revision,
    write_json_atomic,
)
from linrec.studies.common import write_table


def test_provenance_names_linrec_its_commit_and_the_libraries():
    env = environment_info()
    assert env["linrec"]["version"]
    assert {"numpy", "scipy", "torch"} <= set(env["libraries"])
    revision = source_revision()
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    if (root / ".git").exists():
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        assert revision["commit"] == head and isinstance(revision["dirty"], bool)


def test_the_libraries_are_the_distributions_of_the_imported_modules():
    """Modules map to their distributions; the standard library, linrec and installers are
    left out; a namespace package counts only the plugin that was imported."""
    assert imported_distributions(["numpy.linalg", "implicit.cpu.als", "os", "json.decoder",
                                   "linrec.eval", "setuptools", "pip._internal"]) == [
        "implicit", "numpy"]
    assert imported_distributions(["hydra_plugins",
                                   "hydra_plugins.hydra_joblib_launcher.joblib_launcher"]) == [
        "hydra-joblib-launcher"]


def _dist_info(site, name, version, files, top_level=None, folder="dist-info",
               metadata="METADATA"):
    info = site / f"{name.replace('-', '_')}-{version}.{folder}"
    info.mkdir()
    (info / metadata).write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                 "Summary: x\n\nName: not-a-header\n")
    (info / "RECORD").write_text("".join(f"{f},sha256=x,1\n" for f in files))
    if top_level is not None:
        (info / "top_level.txt").write_text(top_level)


def test_distribution_index_agrees_with_importlib_metadata(tmp_path, monkeypatch):
    """The one-pass index of modules and versions equals importlib.metadata's
    packages_distributions and version: on the installed environment, and on a site of
    distributions with and without top_level.txt, an egg-info, a shared namespace package, a
    duplicate name later on the path and quoted RECORD paths."""
    import importlib.metadata as metadata

    from linrec.results import _distribution_version, _installed

    def expected():
        return {m: tuple(dict.fromkeys(d)) for m, d in metadata.packages_distributions().items()}

    modules, _ = _installed.__wrapped__()
    assert modules == expected()
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        assert _distribution_version(name) == metadata.version(name), name

    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    _dist_info(first, "Declared-Pkg", "1.0", ["declared/__init__.py"], top_level="declared\nd2\n")
    _dist_info(first, "inferred_pkg", "2.0rc1",
               ["inferred/__init__.py", "inferred/sub/x.py", "single.py", "data/file.txt",
                '"quoted/__init__.py"', "../../bin/tool.py", "inferred-2.0rc1.dist-info/RECORD"])
    _dist_info(first, "ns-one", "0.1", ["ns/one/__init__.py"])
    _dist_info(first, "ns.two", "0.2", ["ns/two/__init__.py"])
    _dist_info(first, "old_egg", "3", ["old_egg/__init__.py"], top_level="old_egg\n",
               folder="egg-info", metadata="PKG-INFO")
    _dist_info(second, "inferred-pkg", "9.9", ["inferred/__init__.py"])
    monkeypatch.setattr(sys, "path", [str(first), str(second)])
    modules, versions = _installed.__wrapped__()
    assert modules == expected()
    assert modules["ns"] == ("ns-one", "ns.two") or modules["ns"] == ("ns.two", "ns-one")
    for name in ("Declared-Pkg", "inferred_pkg", "ns-one", "ns.two", "old_egg", "Inferred.Pkg"):
        assert versions[re.sub(r"[-_.]+", "-", name).lower()] == metadata.version(name), name


def test_results_record_what_the_run_imported_and_always_torch():
    """A fresh process that imported numba (the default iALS back-end), matplotlib and pyarrow
    records their versions as installed; implicit only once it is imported; torch always, even
    when the run did not import it. Every version is the installed distribution's."""
    script = textwrap.dedent("""
        import json, sys
        from linrec.results import environment_info
        import numba, matplotlib, pyarrow
        first = environment_info()["libraries"]
        import implicit
        second = environment_info()["libraries"]
        print(json.dumps({"first": first, "second": second,
                          "torch_imported": "torch" in sys.modules}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    got = json.loads(out.splitlines()[-1])
    first, second = got["first"], got["second"]
    assert not got["torch_imported"] and first["torch"] == version("torch")
    for name in ("numba", "matplotlib", "pyarrow", "numpy", "scipy", "llvmlite"):
        assert first[name] == version(name), name
    assert "implicit" not in first and second["implicit"] == version("implicit")
    assert "linrec" not in second and "setuptools" not in second
    assert all(second[name] == version(name) for name in second)


def test_report_on_a_results_file_writes_beside_it(tmp_path):
    """`linrec-report run/results.json` used to write into run/results.json/ (a traceback)."""
    record = {"model": "ease", "dataset": {"name": "toy"},
              "splits": {"test": {"exact": {"ndcg@10": 0.25}}}, "timings": {"fit": 1.0}}
    results = write_json_atomic(tmp_path / "run" / "results.json", record)
    assert report_main([str(results), "--no-figures"]) == 0
    csv = (tmp_path / "run" / "report_test.csv").read_text().splitlines()
    header = csv[0].split(",")
    row = dict(zip(header, csv[1].split(","), strict=True))
    assert row["model"] == "ease" and row["ndcg@10"] == "0.25" and row["fit_s"] == "1.0"


def test_collect_reads_the_runs_of_a_study_and_the_report_its_tables(tmp_path):
    study = tmp_path / "study"
    for point, value in (("lam=1", 0.1), ("lam=2", 0.2)):
        write_json_atomic(study / "runs" / "ease" / point / "results.json", {
            "model": "ease", "dataset": {"name": "toy"},
            "splits": {"valid": {"exact": {"ndcg@100": value}}},
            "study": {"name": "linear_models", "label": "ease", "point": {"lam": value * 10}}})
    (study / "tables").mkdir()
    write_table(study / "tables", "main", ["model"], [{"model": "ease"}], title="main")
    write_json_atomic(study / "study.json", {"study": {"name": "linear_models"},
                                             "tables": ["tables/main.md"]})
    from linrec.report.runs import read_runs

    frame = read_runs([study], split="valid").frame
    assert list(frame["study"]) == ["linear_models"] * 2 and list(frame["label"]) == ["ease"] * 2
    assert list(frame["ndcg@100"]) == [0.1, 0.2]
    assert report_main([str(study), "--split", "valid", "--no-figures"]) == 0
    md = (study / "report_valid.md").read_text()
    assert "## Study linear_models" in md and "### main" in md
    assert json.loads((study / "study.json").read_text())["tables"] == ["tables/main.md"]


def test_per_user_rows_carry_the_datasets_own_user_ids(tmp_path):
    """A CSV with string user ids: per_user_test.parquet has their ids beside the row index,
    and each metric's mean over its users is results.json's value."""
    import pandas as pd

    from tests.conftest import run_command

    rng = np.random.default_rng(0)
    lines = ["uid,iid"] + [f"u{u},item{i}" for u in range(200)
                           for i in rng.choice(80, 10, replace=False)]
    (tmp_path / "events.csv").write_text("\n".join(lines) + "\n")
    done = run_command(tmp_path, "data=tabular", "data.path=events.csv",
                       "data.source.user_col=uid", "data.source.item_col=iid",
                       "eval.save_per_user=true", "eval.sampled.enabled=false",
                       "hydra.run.dir=run")
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(tmp_path / "run" / "per_user_test.parquet")
    assert list(rows.columns) == ["user", "user_id", "metric", "value"]
    assert rows["user_id"].str.fullmatch(r"u\d+").all()
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    wide = rows.pivot(index="user_id", columns="metric", values="value")
    for key, value in record["splits"]["test"]["exact"].items():
        assert wide[key].mean() == pytest.approx(value, rel=1e-12), key

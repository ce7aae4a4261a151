"""experiments/same_numbers.py: which numbers it compares, and that a kept reference checkout
of another revision is refused rather than compared against."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "same_numbers.py"


@pytest.fixture(scope="module")
def same_numbers():
    spec = importlib.util.spec_from_file_location("_same_numbers_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_numbers_take_the_metrics_and_the_training_curve_but_not_the_seconds(same_numbers,
                                                                             tmp_path):
    record = {"splits": {"test": {"exact": {"recall@20": 0.25, "ndcg@20": 0.125}}},
              "training": {"epochs": [{"epoch": 1, "loss": 0.5, "lr": 1e-4, "valid": 0.2,
                                       "seconds": 3.0},
                                      {"epoch": 2, "loss": 0.25, "lr": 5e-5, "valid": 0.3,
                                       "seconds": 2.0}]}}
    (tmp_path / "results.json").write_text(json.dumps(record))
    assert same_numbers.numbers(tmp_path) == {
        "./test/exact/recall@20": 0.25, "./test/exact/ndcg@20": 0.125,
        "./training/1/loss": 0.5, "./training/1/lr": 1e-4, "./training/1/valid": 0.2,
        "./training/2/loss": 0.25, "./training/2/lr": 5e-5, "./training/2/valid": 0.3}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_a_kept_reference_of_another_revision_is_refused(same_numbers, tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    for text in ("one", "two"):
        (repo / "file.txt").write_text(text)
        _git(repo, "add", "file.txt")
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", text)
    first = _git(repo, "rev-parse", "HEAD~1")
    keep = tmp_path / "keep"
    keep.mkdir()
    subprocess.run(["git", "clone", "-q", str(repo), str(keep / "ref-src")], check=True)  # at HEAD
    monkeypatch.setattr(same_numbers, "ROOT", repo)
    with pytest.raises(SystemExit, match="not --ref"):
        same_numbers.main(["--ref", first, "--keep", str(keep), "--cases", "none"])
    # the same revision is accepted (no case chosen: nothing runs)
    assert same_numbers.main(["--ref", "HEAD", "--keep", str(keep), "--cases", "none"]) == 0

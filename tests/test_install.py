"""linrec as installed: the package list of pyproject.toml, the wheel with its dependencies in a
fresh venv run from outside the checkout, the console scripts, a quiet output (no warning of any
library), and `linrec --version`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SMALL = ["data.source.n_users=400", "data.source.n_items=150", "eval.sampled.repeats=2",
         "eval.sampled.sample_sizes=[20]"]
#: a Python warning as the warnings module prints it ("file:line: SomeWarning: message")
WARNING_LINE = re.compile(r"\w*Warning\b")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_package_list_names_every_package_of_the_checkout():
    """pyproject.toml lists the packages by hand (conf/ ships as linrec.conf): a new subpackage
    missing from the list would be missing from every wheel."""
    tool = _pyproject()["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for top in ("linrec", "hydra_plugins") for p in (ROOT / top).rglob("__init__.py")}
    found |= {"hydra_plugins", "linrec.conf"}
    assert set(tool["packages"]) == found
    assert tool["package-dir"] == {"linrec.conf": "conf"}


def test_hydra_and_omegaconf_are_bounded_below_their_next_minor_release():
    """pip 23 (a new venv's own) takes Hydra 1.4 release candidates unless the bound excludes
    them; linrec is tested on Hydra 1.3 and OmegaConf 2.3 only."""
    deps = _pyproject()["project"]["dependencies"]
    assert "hydra-core>=1.3.2,<1.4" in deps and "omegaconf>=2.3,<2.4" in deps


def _quiet(proc: subprocess.CompletedProcess) -> list[str]:
    """The lines of a command's output that are Python warnings."""
    return [line for line in (proc.stdout + proc.stderr).splitlines()
            if WARNING_LINE.search(line)]


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess:
    env = {**os.environ, "LINREC_DATA": str(cwd / "cache"), **(env or {})}
    env.pop("PYTHONWARNINGS", None)
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{cmd}:\n{proc.stdout}\n{proc.stderr}"
    assert not _quiet(proc), f"{cmd} printed warnings:\n" + "\n".join(_quiet(proc))
    return proc


def _config_source(run_dir: Path) -> str:
    """Where Hydra read the run's configs from (.hydra/hydra.yaml, runtime.config_sources)."""
    text = (run_dir / ".hydra" / "hydra.yaml").read_text()
    return re.search(r"path: (\S+)\n\s+schema: file\n\s+provider: main", text).group(1)


@pytest.mark.slow
def test_the_installed_commands_run_and_print_no_warnings(tmp_path):
    """The console scripts of this (the test extra's) environment, whose libraries differ from
    a user's install: the Optuna sweeper and linrec-report (with its figures) print no warning.
    The other commands run from a fresh install in the wheel test below."""
    sweep = _run([str(BIN / "linrec"), "-m", *SMALL, "hydra/sweeper=optuna",
                  "hydra.sweeper.n_trials=2", "model.lam=interval(5,2000)",
                  "hydra.sweep.dir=optuna"], tmp_path)
    assert "optuna: best value" in sweep.stdout + sweep.stderr
    assert len(list((tmp_path / "optuna").glob("*/results.json"))) == 2
    report = _run([str(BIN / "linrec-report"), "optuna", "--out", "report"], tmp_path)
    assert (tmp_path / "report" / "report_test.md").exists(), report.stdout


def _wheel(tmp_path: Path) -> Path:
    """A wheel built from a copy of the checkout's sources (a build in the checkout would leave
    build/ there, whose stale files later builds would pack)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for name in ("linrec", "conf", "hydra_plugins"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--quiet", "--wheel-dir", str(out), str(src)], check=True, timeout=600,
                   capture_output=True)
    return next(out.glob("linrec-*.whl"))


@pytest.mark.slow
def test_a_wheel_installed_with_its_dependencies_runs_its_commands(tmp_path):
    """The artefact a user installs: the wheel with its `sweep` extra and every dependency (the
    lock's versions, torch by the README's pin) in a fresh venv, run from that venv's bin/
    outside the checkout. `linrec` (a run that keeps its model, a sweep, the Optuna sweeper,
    `--version`), `linrec-report` and `linrec-recommend` work, read the configs inside the
    installed wheel and print no warning."""
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # --no-compile: the byte-code of torch's 20k modules is written on first import instead
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile",
           "--disable-pip-version-check"]
    wheel = _wheel(tmp_path)
    for packages in (["torch==2.13.0"],
                     ["-c", str(ROOT / ".ci" / "lock.txt"), f"linrec[sweep] @ {wheel.as_uri()}"]):
        installed = subprocess.run([*pip, *packages], capture_output=True, text=True,
                                   timeout=1200)
        assert installed.returncode == 0, installed.stdout + installed.stderr
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {"PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
           "HOME": str(tmp_path / "home"), "PYTHONPATH": ""}

    def command(name: str, *args: str) -> subprocess.CompletedProcess:
        return _run([str(venv / "bin" / name), *args], work, env)

    command("linrec", *SMALL, "save_model=true", "hydra.run.dir=run")
    assert json.loads((work / "run" / "results.json").read_text())["model"] == "ease"
    site = next((venv / "lib").glob("python3.*/site-packages"))
    assert _config_source(work / "run") == str(site / "linrec" / "conf")
    command("linrec", "-m", *SMALL, "model.lam=100,300", "hydra.sweep.dir=sweep")
    assert sorted(p.parent.name for p in (work / "sweep").glob("*/results.json")) == [
        "model.lam=100", "model.lam=300"]
    command("linrec", "-m", *SMALL, "hydra/sweeper=optuna", "hydra.sweeper.n_trials=2",
            "model.lam=interval(5,2000)", "hydra.sweep.dir=optuna")
    assert len(list((work / "optuna").glob("*/results.json"))) == 2
    version = command("linrec", "--version").stdout.splitlines()
    assert version[0].startswith("linrec 0.") and "commit unknown" in version[0]
    assert {line.split()[0] for line in version[1:]} >= {
        "numpy", "scipy", "torch", "implicit", "numba", "hydra-core", "omegaconf"}
    report = command("linrec-report", "sweep", "--out", "report", "--no-figures")
    assert (work / "report" / "report_test.md").exists(), report.stdout
    command("linrec-recommend", "run", "-k", "5")
    lists = (work / "run" / "recommendations_test.tsv").read_text().splitlines()
    assert lists[0].split("\t") == ["user", "rank", "item", "score"] and len(lists) > 5


def test_version_names_the_commit_and_the_libraries():
    from importlib.metadata import version

    proc = subprocess.run([sys.executable, "-c", "from linrec.cli import main; main()",
                           "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and not proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    if commit:  # a git checkout (CI's is one)
        assert commit in lines["linrec"]
    for name in ("numpy", "scipy", "torch", "implicit", "numba", "hydra-core", "omegaconf"):
        assert lines[name] == version(name)


def test_ci_runs_the_readmes_two_commands():
    """.ci/run runs the commands it reads from the README's quick start, so the two cannot
    drift apart: the first sets up .venv the way the README says and runs linrec, the second
    runs the tests."""
    sys.path.insert(0, str(ROOT / ".ci"))
    try:
        from readme_commands import quick_start_commands
    finally:
        sys.path.remove(str(ROOT / ".ci"))
    setup, tests = quick_start_commands((ROOT / "README.md").read_text())
    assert setup.startswith("python3 -m venv .venv && ") and "pip install -e '.[test]'" in setup
    assert "--upgrade pip" not in setup and setup.endswith(".venv/bin/linrec")
    assert tests == ".venv/bin/python -m pytest -q"
    assert "python3 .ci/readme_commands.py README.md" in (ROOT / ".ci" / "run").read_text()

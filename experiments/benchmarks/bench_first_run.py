"""Benchmark what a new user waits for: `linrec --version`, `linrec --help`, and the default
`linrec` run (EASE on the embedded synthetic data) cold, as from a fresh install (empty HOME,
caches, `LINREC_DATA` and numba cache: matplotlib's font list and the data are built; the
default run needs no compiled kernel), and warm (the same command again), the warm run also
without its figures; each in a fresh process, timed from the outside. The run's own phases
(data, fit, evaluation, and each split's scores, exact ranks, sampled ranks and estimators)
come from its results.json, its wait for the figures at its end from its linrec.log; the rest
of its wall time is the interpreter, the imports, the config's composition and check and the
writing of the outputs. Reference, timed in the same run: a fresh interpreter importing the
libraries every default run needs (numpy, scipy.sparse, Hydra, matplotlib's Agg canvas; it
also pays the interpreter's teardown of them, which linrec's console scripts skip).

    python experiments/benchmarks/bench_first_run.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: the installed `linrec` console script (pyproject.toml), as Python code
LINREC = [sys.executable, "-c", "from linrec.cli import linrec_script; linrec_script()"]
FLOOR = [sys.executable, "-c", "import numpy, scipy.sparse, hydra, matplotlib.backends.backend_agg"]
#: the targets of a fresh install's first run, the same again, and --version / --help (s)
TARGETS = {"linrec (cold)": 5.0, "linrec (warm)": 3.0, "linrec --version": 1.0,
           "linrec --help": 1.0}


def fresh_environment(root: Path) -> dict[str, str]:
    """Empty HOME, caches, data directory and numba cache below `root`; bytecode cached as
    Python does by default."""
    env = dict(os.environ)
    # a user's Python caches compiled bytecode (this workplace's shells turn that off)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for name, sub in (("HOME", "home"), ("XDG_CACHE_HOME", "cache"), ("LINREC_DATA", "data"),
                      ("NUMBA_CACHE_DIR", "numba"), ("MPLCONFIGDIR", "matplotlib")):
        (root / sub).mkdir(parents=True, exist_ok=True)
        env[name] = str(root / sub)
    return env


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[3:]) or argv}: exit {done.returncode}\n{done.stderr}")
    return elapsed


#: the run's log line that says how long it waited for its figures (linrec.figure_process)
FIGURE_WAIT = re.compile(r"the run waited ([0-9.]+)s|figure files drawn in ([0-9.]+)s")
#: the phases of each split's evaluation, as results.json times them
SPLIT_PHASES = (("score", "scores"), ("rank", "exact ranks"), ("hooks", "sampled ranks"),
                ("estimators", "estimators"))


def phases(run_dir: Path) -> dict[str, float]:
    """The run's own timings (data, fit, evaluate), the figures' wait from its log, and each
    split's evaluation phases ("<split> <phase>")."""
    record = json.loads((run_dir / "results.json").read_text())
    found = {key: record["timings"][key] for key in ("data", "fit", "evaluate")}
    waits = FIGURE_WAIT.findall((run_dir / "linrec.log").read_text())
    found["figures"] = sum(float(a or b) for a, b in waits)
    for name, split in record["splits"].items():
        for key, _ in SPLIT_PHASES[:3]:
            found[f"{name} {key}"] = split["timings"].get(key, 0.0)
        found[f"{name} estimators"] = sum(
            seconds for setting in (split.get("sampled") or {}).values()
            for seconds in (setting.get("timings") or {}).values())
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {}
    run_phases: dict[str, list[dict[str, float]]] = {"linrec (cold)": [], "linrec (warm)": []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            root = Path(tmp) / f"r{repeat}"
            env = fresh_environment(root)
            cases = [("reference: the libraries' imports", FLOOR, None),
                     ("linrec --version", [*LINREC, "--version"], None),
                     ("linrec --help", [*LINREC, "--help"], None),
                     ("linrec (cold)", [*LINREC, "hydra.run.dir=cold"], "cold"),
                     ("linrec (warm)", [*LINREC, "hydra.run.dir=warm"], "warm"),
                     ("linrec figures=false (warm)",
                      [*LINREC, "figures=false", "hydra.run.dir=nofig"], None)]
            for name, command, run_dir in cases:
                times.setdefault(name, []).append(timed(command, env, root))
                if run_dir:
                    run_phases[name].append(phases(root / run_dir))
            shutil.rmtree(root)
    floor = statistics.median(times["reference: the libraries' imports"])
    print(f"{'case':<36} {'median s':>9} {'x reference':>12} {'target s':>9}")
    for name, values in times.items():
        median = statistics.median(values)
        target = TARGETS.get(name)
        print(f"{name:<36} {median:9.2f} {median / floor:12.2f} "
              f"{'' if target is None else f'{target:.1f}':>9}")
    print()
    columns = (("data", 7), ("fit", 7), ("evaluate", 11), ("figures", 10))
    print(f"{'run':<16} " + " ".join(f"{key + ' s':>{width}}" for key, width in columns)
          + f" {'the rest s':>11}")
    for name, records in run_phases.items():
        rest = [wall - sum(p[key] for key, _ in columns)
                for wall, p in zip(times[name], records, strict=True)]
        print(f"{name:<16} " + " ".join(
            f"{statistics.median(p[key] for p in records):{width}.2f}" for key, width in columns)
            + f" {statistics.median(rest):11.2f}")
    print("(figures: what the run waited for its figures at its end; the rest: the interpreter, "
          "the imports, the config's composition and check, writing the outputs)")
    warm = run_phases["linrec (warm)"]
    splits = [key.split()[0] for key in warm[0] if key.endswith(" score")]
    print(f"\nthe warm run's evaluation, medians (s): {'':<4}" +
          " ".join(f"{label:>14}" for _, label in SPLIT_PHASES))
    for split in splits:
        print(f"  {split:<42}" + " ".join(
            f"{statistics.median(p[f'{split} {key}'] for p in warm):14.2f}"
            for key, _ in SPLIT_PHASES))
    figures = statistics.median(times["linrec (warm)"]) - \
        statistics.median(times["linrec figures=false (warm)"])
    print(f"\nthe figures (warm run with them minus without): {figures:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

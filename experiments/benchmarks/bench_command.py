"""Benchmark the `linrec` command around a small run: Hydra taking the precheck's composition of
the config (`hydra_compat.precomposed`) against Hydra composing it again, once to read
`hydra.mode` and once to run it (as it does alone), and again only to run it. The three are
timed in turn in this process, after the imports (as the tests' fork server runs a command), on
a run that fits EASE on 400 users x 150 items, so that the command's own cost dominates.

    python experiments/benchmarks/bench_command.py [--repeats 15] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from linrec.hydra_compat import precomposed

ARGS = ["data.source.n_users=400", "data.source.n_items=150", "eval.sampled.enabled=false",
        "quiet=true"]


def _mode_only(cfg, overrides):
    """`precomposed` answering `hydra.mode` only: no run's overrides match."""
    return precomposed(cfg, ["(none)"])


#: variant -> what stands for `hydra_compat.precomposed` (None: itself)
VARIANTS = {
    "Hydra composes to read the mode and to run": lambda *args: contextlib.nullcontext(),
    "Hydra composes to run": _mode_only,
    "the precheck's composition taken": None,
}


def run_once(workdir: Path, stand_in) -> float:
    """Seconds of one `linrec` command into `workdir`."""
    from linrec.cli import main

    sys.argv = ["linrec", *ARGS, f"hydra.run.dir={workdir}"]
    patched = mock.patch("linrec.hydra_compat.precomposed", stand_in) if stand_in \
        else contextlib.nullcontext()
    with patched, contextlib.redirect_stdout(io.StringIO()):
        start = time.perf_counter()
        main()
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="5 repeats")
    args = parser.parse_args()
    repeats = 5 if args.quick else args.repeats
    root = Path(tempfile.mkdtemp(prefix="bench_command_"))
    os.environ["LINREC_DATA"] = str(root / "cache")
    os.chdir(root)
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for index in range(repeats + 1):  # the first round writes the data cache: not counted
        for number, (name, stand_in) in enumerate(VARIANTS.items()):
            took = run_once(root / f"run_{index}_{number}", stand_in)
            if index:
                seconds[name].append(took)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    reference = median[next(iter(VARIANTS))]
    print(f"`linrec` command, EASE on 400 x 150 synthetic, median of {repeats} (in turn)")
    print(f"{'config':<44} {'s a command':>12} {'ratio':>7}")
    for name, value in median.items():
        print(f"{name:<44} {value:>12.3f} {value / reference:>7.2f}")


if __name__ == "__main__":
    main()

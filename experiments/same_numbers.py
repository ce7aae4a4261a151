"""Same numbers before and after a change of code.

Runs every case below (the default run, every model config, both study presets) with the linrec of
a git revision (checked out in a temporary worktree) and with this checkout, and compares every
number they write: exact metrics, sampled estimates and their errors and the training curves
(loss, lr, validation metric per epoch) in results.json, and every cell of the study tables.
Exits 1 when a number differs beyond `--rtol` (default: not at all).

    python experiments/same_numbers.py --ref 688c17e            # all cases
    python experiments/same_numbers.py --ref 688c17e --cases default,ials --keep /tmp/sn

Both sides run with the same thread count (`--threads`, default 1: LINREC_THREADS and the BLAS /
OpenMP variables): OpenBLAS's threaded LAPACK rounds differently with another number of threads
(an EASE fit at 2 000 items differs by ~1e-7 between 1 and 2 threads), which is not a change of
code. A kept reference run is reused only when it ran with the same count.

A case may give other overrides (`ref`) for a reference revision that refuses its own (a config key
renamed since; they are tried when the case's overrides fail there), and may name numbers that
are expected to differ (`differs`, with the reason); those are reported, not counted as failures.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["data.source.n_users=2000", "data.source.n_items=800", "eval.sampled.repeats=3"]


@dataclass
class Case:
    name: str
    overrides: list[str]
    ref: list[str] | None = None  # overrides for a reference revision that refuses `overrides`
    differs: dict[str, str] = field(default_factory=dict)  # part of a key -> why it may differ


def _model(name: str, *params: str, ref: list[str] | None = None) -> Case:
    overrides = [f"model={name}", *SMALL, *params]
    return Case(name, overrides, ref=None if ref is None else [f"model={name}", *SMALL, *ref])


CASES = [
    Case("default", []),
    _model("ease", "model.lam=300"),
    _model("dlae"),
    _model("edlae"),
    _model("edlae_lowrank", "model.rank=100", "model.n_iter=10"),
    _model("debiased_ease", "model.alpha=0.3"),
    _model("most_popular"),
    _model("itemknn"),
    _model("slim", "model.l1=0.5", "model.max_iter=50"),
    _model("lrr", "model.rank=200", "model.lam=1000"),
    _model("puresvd", "model.rank=64"),
    _model("mf_closed", "model.rank=100", "model.lam=50"),
    _model("ridge"),
    _model("ials", "model.epochs=4", "model.backend=torch"),
    _model("debiased_ials", "model.epochs=4", "model.backend=torch"),
    _model("wmf", "model.iterations=4"),
    _model("learned_lambda", "model.rank=100", "model.lam=1000", "model.c=500", "model.epochs=2"),
    _model("nearby_ht", "model.epochs=2"),
    _model("nearby_sparse", "model.epochs=2"),
    _model("mf", "model.epochs=3", "model.batch_size=256", "model.sampling.n_negatives=64",
           "model.select_on=test"),
    Case("mf_shared_sparse", ["model=mf", *SMALL, "model.epochs=3", "model.batch_size=256",
                              "model.sampling.n_negatives=64", "model.select_on=test",
                              "model.sampling.negatives=shared", "model.optimizer=sparse_adam",
                              "model.reg_mode=batch_rows"]),
    Case("mf_debiased", ["model=mf", "loss=debiased_ccl", "prior=count_k", *SMALL,
                         "model.epochs=2", "model.batch_size=256",
                         "model.sampling.n_negatives=64", "model.sampling.n_positives=5",
                         "model.select_on=test"]),
    Case("sampling_study",
         ["experiment=sampling_study", "data.source.n_users=2000", "data.source.n_items=800",
          "eval.sampled.repeats=5", "eval.sampled.sample_sizes=[50,100]"],
         ref=["experiment=sampling_study", "data.source.n_users=2000", "data.source.n_items=800",
              "study.repeats=5", "study.sample_sizes=[50,100]"],
         differs={"tables/are_adaptive": "the adaptive simulation now uses the run's seed "
                                         "stream (issue 8: it was seeded differently)",
                  "tables/winners/adaptive/": "same reason",
                  "/ials/": "the study's iALS takes the one default back-end now (issue 8: the "
                            "YAML said torch, the class numpy; numba since issue 11), which "
                            "rounds differently"}),
    Case("linear_models",
         ["experiment=linear_models", "data=synthetic", "study.models.lrr.grid.rank=[50,100]",
          "study.models.lrr.grid.lam=[100,1000]", "study.models.mf.grid.rank=[50,100]",
          "study.models.mf.grid.lam=[0,10]"]),
]


def run_case(root: Path, case: Case, out: Path, cache: Path, reference: bool,
             threads: int) -> Path:
    """Run one case with the linrec found at `root` on `threads` threads; returns its run
    directory. A reference run kept from an earlier call (`--keep`) with the same thread count
    is reused."""
    run_dir = out / case.name
    done_marker = run_dir / ".done"
    if reference and done_marker.exists() and done_marker.read_text().strip() == str(threads):
        return run_dir
    # a reference revision takes the case's overrides, or else (older keys) its `ref` ones
    attempts = [case.overrides] + ([case.ref] if reference and case.ref is not None else [])
    bootstrap = (f"import sys; sys.path.insert(0, {str(root)!r}); sys.argv[0] = 'linrec'; "
                 "from linrec.cli import main; main()")
    env = {**os.environ, "LINREC_DATA": str(cache), "LINREC_CONF": str(root / "conf"),
           **{name: str(threads) for name in ("LINREC_THREADS", "OPENBLAS_NUM_THREADS",
                                              "OMP_NUM_THREADS", "MKL_NUM_THREADS")}}
    errors = []
    for overrides in attempts:
        shutil.rmtree(run_dir, ignore_errors=True)
        cmd = [sys.executable, "-c", bootstrap, *overrides, f"hydra.run.dir={run_dir}",
               "quiet=true"]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=out)
        if done.returncode == 0:
            done_marker.write_text(str(threads))
            return run_dir
        errors.append(f"{' '.join(overrides)}:\n{done.stderr[-3000:]}")
    raise SystemExit(f"{case.name} failed with {root}:\n" + "\n".join(errors))


def _flat(prefix: str, value, out: dict[str, float]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}/{k}", v, out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out[prefix] = float(value)


def _sampled_blocks(sampled: dict) -> dict[str, dict]:
    """{setting: block}; the single-block schema (before issue 8) is split into its fixed-size
    setting and its adaptive estimators."""
    if "protocol" not in sampled:
        return sampled
    fixed = {e: v for e, v in sampled["estimators"].items() if e != "adaptive_mle"}
    blocks = {f"n={sampled['protocol']['sample_size']}": {"exact": sampled["exact"],
                                                           "estimators": fixed}}
    if "adaptive_mle" in sampled["estimators"]:
        blocks["adaptive"] = {"exact": sampled["exact"],
                              "estimators": {"adaptive_mle": sampled["estimators"]["adaptive_mle"]}}
    return blocks


def numbers(run_dir: Path) -> dict[str, float]:
    """Every compared number of a run directory: results.json metrics, the training curve of a
    trained model (loss, lr, validation metric per epoch) and study table cells."""
    out: dict[str, float] = {}
    for results in sorted(run_dir.rglob("results.json")):
        rel = results.parent.relative_to(run_dir).as_posix()
        record = json.loads(results.read_text())
        for split, block in record.get("splits", {}).items():
            _flat(f"{rel}/{split}/exact", block.get("exact", {}), out)
            for setting, sampled in _sampled_blocks(block.get("sampled") or {}).items():
                _flat(f"{rel}/{split}/sampled/{setting}/exact", sampled["exact"], out)
                for name, est in sampled["estimators"].items():
                    _flat(f"{rel}/{split}/sampled/{setting}/{name}", est, out)
        for epoch in record.get("training", {}).get("epochs", []):  # trained models' curves
            _flat(f"{rel}/training/{epoch.get('epoch')}",
                  {k: v for k, v in epoch.items() if k not in ("epoch", "seconds")}, out)
    for table in sorted(run_dir.rglob("tables/*.csv")):
        with open(table) as fh:
            for i, row in enumerate(csv.DictReader(fh)):
                label = "/".join(str(v) for k, v in row.items()
                                 if k in ("model", "metric", "setting", "k", "mapping")) or str(i)
                for column, cell in row.items():
                    for j, part in enumerate(str(cell).split("±")):
                        try:
                            out[f"tables/{table.stem}/{label}/{column}/{j}"] = float(part)
                        except ValueError:
                            pass
    return out


def compare(case: Case, ref: dict[str, float], new: dict[str, float], rtol: float) -> int:
    """Print the differences (a number of `ref` missing from `new` is one); return how many are
    failures. Numbers only `new` has are counted, not compared."""
    failures = 0
    added = sorted(set(new) - set(ref))
    if added:
        print(f"  {len(added)} numbers added (e.g. {added[0]})")
    for key in sorted(ref):
        a, b = ref[key], new.get(key)
        if a is not None and b is not None and (a == b or math.isclose(a, b, rel_tol=rtol)):
            continue
        reason = next((why for part, why in case.differs.items() if part in key), None)
        tag = f"expected ({reason})" if reason else "DIFFERS"
        failures += reason is None
        print(f"  {tag}: {key}: {a} -> {b}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", required=True, help="git revision to compare with")
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default 0)")
    parser.add_argument("--keep", default=None, help="directory to keep the runs in")
    parser.add_argument("--threads", type=int, default=1, help="threads of both sides (default 1)")
    args = parser.parse_args(argv)
    chosen = [c for c in CASES if not args.cases or c.name in args.cases.split(",")]
    work = Path(args.keep or tempfile.mkdtemp(prefix="same-numbers-"))
    worktree = work / "ref-src"
    if not worktree.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree),
                        args.ref], check=True, capture_output=True)
    elif _commit(worktree, "HEAD") != _commit(ROOT, args.ref):  # a --keep of another revision
        raise SystemExit(f"{worktree} holds {_commit(worktree, 'HEAD')[:9]}, not --ref "
                         f"{args.ref}: give another --keep directory")
    failures = 0
    try:
        for case in chosen:
            ref_dir = run_case(worktree, case, _mkdir(work / "ref"), work / "cache-ref", True,
                               args.threads)
            new_dir = run_case(ROOT, case, _mkdir(work / "new"), work / "cache-new", False,
                               args.threads)
            ref, new = numbers(ref_dir), numbers(new_dir)
            print(f"{case.name}: {len(ref)} numbers before, {len(new)} after")
            failures += compare(case, ref, new, args.rtol)
    finally:
        if args.keep is None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(worktree)], capture_output=True)
    print("same numbers" if failures == 0 else f"{failures} numbers differ")
    return 1 if failures else 0


def _commit(repo: Path, revision: str) -> str:
    """The commit id of `revision` in the git checkout `repo`."""
    return subprocess.run(["git", "-C", str(repo), "rev-parse", f"{revision}^{{commit}}"],
                          check=True, capture_output=True, text=True).stdout.strip()


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


if __name__ == "__main__":
    sys.exit(main())

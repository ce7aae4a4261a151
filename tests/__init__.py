"""linrec's test suite (README.md, Contributing).

Imported before any test module, and so before numpy or torch load: each pytest-xdist worker
(`-n auto` in pyproject.toml) is given cores of its own here, which every thread and process it
starts inherits. Two workers that each start a thread per core would otherwise share the cores
four ways, and OpenMP's and OpenBLAS's spinning threads make that several times slower than
running one after the other.
"""

import os

#: the cores this process was given before a worker took its share: a service that a test starts
#: for the whole machine (the SLURM cluster) runs on these (`preexec_fn=on_all_cores`)
ALL_CORES = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def on_all_cores() -> None:
    """Undo the worker's share in a child process (a `subprocess` preexec_fn)."""
    if ALL_CORES:
        os.sched_setaffinity(0, ALL_CORES)


def _give_the_worker_its_cores() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ...
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if not worker.startswith("gw") or count < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    index = int(worker[2:])
    if count > len(cores):  # more workers than cores: share them round robin
        os.sched_setaffinity(0, {cores[index % len(cores)]})
        return
    share = len(cores) // count
    os.sched_setaffinity(0, cores[index * share:(index + 1) * share])


_give_the_worker_its_cores()

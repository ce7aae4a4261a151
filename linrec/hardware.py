"""What the machine offers, read in one place: the cores this process may use, the threads
linrec may start, and the memory the OS reports as available."""

from __future__ import annotations

import os

#: caps the threads of linrec's models and evaluator (set for each of several parallel jobs)
THREADS_ENV = "LINREC_THREADS"


def cpu_cores() -> int:
    """Cores this process may run on (its CPU affinity; os.cpu_count() where that is unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def thread_limit() -> int:
    """The threads linrec may start: $LINREC_THREADS when set (a positive integer), else every
    core this process may run on."""
    value = os.environ.get(THREADS_ENV, "").strip()
    if value:
        try:
            return max(1, min(int(value), cpu_cores()))
        except ValueError:
            pass
    return cpu_cores()


def available_memory_bytes() -> int:
    """Memory the OS reports as available (MemAvailable), or 8 GiB when unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 << 30

"""What the machine offers, read in one place: the cores this process may use, the threads
linrec may start, and the memory the OS reports as available."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any, TypeVar

from linrec.errors import ConfigError, MemoryBudgetError

T = TypeVar("T")

#: caps the threads of linrec's models and evaluator (set for each of several parallel jobs)
THREADS_ENV = "LINREC_THREADS"
#: bytes per score cell assumed when sizing scoring batches (scores + the model's temporaries)
_BYTES_PER_CELL = 16


def cpu_cores() -> int:
    """Cores this process may run on (its CPU affinity; os.cpu_count() where that is unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def cpu_model() -> str:
    """The processor's model name as the kernel reports it ('AMD EPYC', 'Intel(R) Xeon(R) ...'),
    else platform.processor() (timings are only comparable on the same kind of CPU)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


def thread_limit() -> int:
    """The threads linrec may start: $LINREC_THREADS when set (a positive integer), else every
    core this process may run on."""
    value = os.environ.get(THREADS_ENV, "").strip()
    if not value:
        return cpu_cores()
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"${THREADS_ENV}={value!r} is not a positive integer; unset it to use "
                          f"every core ({cpu_cores()})")
    return min(int(value), cpu_cores())


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


def batch_size_for(n_items: int, memory_budget_mb: float) -> int:
    """Rows per scoring batch so that rows x n_items x _BYTES_PER_CELL fits the budget."""
    if not memory_budget_mb > 0:
        raise ConfigError(f"memory_budget_mb={memory_budget_mb} must be > 0")
    rows = int(memory_budget_mb * 2**20 // (max(n_items, 1) * _BYTES_PER_CELL))
    if rows < 1:
        need = n_items * _BYTES_PER_CELL / 2**20
        raise MemoryBudgetError(f"memory_budget_mb={memory_budget_mb} cannot hold one score row "
                                f"of {n_items} items; raise it to at least {need:.2f}")
    return rows


@lru_cache(maxsize=1)
def _threadpool_controller():
    # the controller sees the libraries loaded when it is built: scipy.linalg brings its own
    # OpenBLAS (numpy has another), so load it first or `blas_threads` would not limit it
    import scipy.linalg  # noqa: F401
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@contextlib.contextmanager
def blas_threads(n_threads: int | None) -> Iterator[None]:
    """Limit the BLAS/LAPACK thread pools to `n_threads` inside the block (None: no limit).
    The one place linrec limits BLAS threads (the controller is built once: building it scans
    every loaded library)."""
    if n_threads is None:
        yield
        return
    with _threadpool_controller().limit(limits=max(1, int(n_threads)), user_api="blas"):
        yield


@contextlib.contextmanager
def torch_threads(n_threads: int) -> Iterator[None]:
    """torch's intra-op thread count set to `n_threads` inside the block, restored after."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n_threads)))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def on_row_chunks(work: Callable[[int, int], T], n_rows: int, threads: int,
                  rows_per_task: int = 16) -> list[T]:
    """[work(start, stop) for consecutive chunks of rows 0..n_rows], the chunks run on up to
    `threads` threads (for compiled kernels that release the GIL). Chunks are small and taken
    in turn, so rows of uneven cost spread over the threads; one thread runs one chunk.

    The calling thread takes chunks too, beside `threads` - 1 helpers from a process-wide pool
    started once per count (a training step calls this several times). So no more threads run
    than asked: torch's OpenMP worker, which spins for a while after each torch op, then
    competes with one thread less (all-pool workers made the MF step 5 % slower). Helpers
    that have not started when the chunks run out are cancelled, so a call from inside a
    helper cannot wait on itself."""
    threads = min(int(threads), max(1, n_rows // rows_per_task))
    if threads <= 1:
        return [work(0, n_rows)]
    step = max(1, min(rows_per_task, -(-n_rows // (4 * threads))))
    starts = range(0, n_rows, step)
    results: list[Any] = [None] * len(starts)
    taken = itertools.count()  # next() on it is atomic under the GIL
    failed: list[bool] = []  # set when a chunk raised: the others stop taking chunks

    def drain() -> None:
        while True:
            k = next(taken)
            if k >= len(starts) or failed:
                return
            try:
                results[k] = work(starts[k], min(n_rows, starts[k] + step))
            except BaseException:
                failed.append(True)
                raise

    helpers = [_pool(threads - 1).submit(drain) for _ in range(threads - 1)]
    try:
        drain()
    finally:
        for helper in helpers:  # a helper still queued is cancelled; a running one finishes
            if not helper.cancel():
                helper.exception()
    for helper in helpers:
        if not helper.cancelled() and helper.exception() is not None:
            raise helper.exception()
    return results


_POOLS: dict[int, ThreadPoolExecutor] = {}


def _pool(workers: int) -> ThreadPoolExecutor:
    """The process-wide pool of `workers` threads (idle threads cost nothing)."""
    if workers not in _POOLS:
        _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="linrec")
    return _POOLS[workers]

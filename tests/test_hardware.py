"""linrec.hardware: cores, the thread limit ($LINREC_THREADS), memory, scoring batch sizes, and
the BLAS / torch thread limits that restore what they changed."""

from __future__ import annotations

import os
import re

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import linrec.hardware as hardware
from linrec.errors import ConfigError, MemoryBudgetError
from linrec.hardware import (
    THREADS_ENV,
    available_memory_bytes,
    batch_size_for,
    blas_threads,
    cpu_cores,
    thread_limit,
    torch_threads,
)


def test_cpu_cores_are_the_affinity_of_this_process():
    assert cpu_cores() == len(os.sched_getaffinity(0)) >= 1


@pytest.mark.parametrize("value, expected", [
    (None, 8),    # unset: every core
    ("3", 3),
    (" 2 ", 2),
    ("64", 8),    # capped at the cores
    ("", 8),
])
def test_thread_limit_follows_linrec_threads(monkeypatch, value, expected):
    monkeypatch.setattr(hardware, "cpu_cores", lambda: 8)
    if value is None:
        monkeypatch.delenv(THREADS_ENV, raising=False)
    else:
        monkeypatch.setenv(THREADS_ENV, value)
    assert thread_limit() == expected


@pytest.mark.parametrize("value", ["0", "-4", "many", "2.5"])
def test_a_thread_limit_that_is_not_a_positive_integer_is_refused(monkeypatch, value):
    monkeypatch.setenv(THREADS_ENV, value)
    with pytest.raises(ConfigError, match=rf"\$LINREC_THREADS='{re.escape(value)}' is not a "
                                          "positive integer"):
        thread_limit()


def test_available_memory_is_positive_and_below_the_total():
    with open("/proc/meminfo") as fh:
        total = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemTotal:"))
    assert 0 < available_memory_bytes() <= total


def test_batch_size_fills_the_budget_with_score_rows():
    # 16 bytes per score cell: 64 MB hold 64 * 2**20 / (1000 * 16) = 4194.3 rows of 1000 items
    assert batch_size_for(1000, 64) == 4194
    assert batch_size_for(2**20, 16) == 1  # exactly one row
    assert batch_size_for(0, 1) == 2**20 // 16  # an empty catalogue counts as one item


@pytest.mark.parametrize("budget", [0, -1.0, float("nan")])
def test_a_budget_that_is_not_positive_is_refused(budget):
    with pytest.raises(ConfigError, match="memory_budget_mb="):
        batch_size_for(100, budget)


def test_a_budget_below_one_row_says_how_much_is_needed():
    with pytest.raises(MemoryBudgetError, match=r"memory_budget_mb=1 cannot hold one score row "
                                                r"of 1000000 items; raise it to at least 15.26"):
        batch_size_for(1_000_000, 1)


def _blas() -> list[int]:
    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


def test_blas_threads_limits_inside_the_block_and_restores_after():
    import scipy.linalg  # noqa: F401  (blas_threads loads scipy's BLAS: list it in `before` too)

    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas()
        with blas_threads(1):
            assert set(_blas()) == {1}
        assert _blas() == before
        with pytest.raises(RuntimeError), blas_threads(1):
            raise RuntimeError("fails inside")
        assert _blas() == before
        with blas_threads(None):  # no limit
            assert _blas() == before
        with blas_threads(0):  # at least one thread
            assert set(_blas()) == {1}


def test_torch_threads_sets_and_restores_torchs_thread_count():
    import torch
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), torch_threads(1):
        raise RuntimeError("fails inside")
    assert torch.get_num_threads() == before
    with torch_threads(0):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_blas_threads_limits_scipys_blas_even_when_numpy_was_the_only_one_loaded():
    """The controller is built once: it must see scipy's OpenBLAS (separate from numpy's)."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import numpy
        from linrec.hardware import blas_threads
        with blas_threads(1):
            pass  # builds the controller before anything imported scipy.linalg
        import scipy.linalg
        from threadpoolctl import threadpool_info
        with blas_threads(1):
            print(sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=120).stdout.strip()
    assert out == "[1]"


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("n_rows", [0, 1, 15, 16, 17, 1000])
def test_on_row_chunks_covers_every_row_once_in_order(threads, n_rows):
    """The results come back in row order, the chunks tile [0, n_rows) exactly, and no more
    than `threads` threads run them, the caller among them."""
    import threading

    seen = []

    def work(start, stop):
        seen.append(threading.get_ident())
        return (start, stop)

    chunks = hardware.on_row_chunks(work, n_rows, threads, rows_per_task=4)
    assert chunks[0][0] == 0 and chunks[-1][1] == n_rows
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(chunks, chunks[1:], strict=False))
    assert len(set(seen)) <= threads
    if threads == 1 or n_rows < 2 * 4:
        assert set(seen) == {threading.get_ident()}


def test_on_row_chunks_raises_a_chunks_error_and_runs_no_chunk_after_it():
    calls = []

    def work(start, stop):
        calls.append(start)
        if start == 40:
            raise ValueError("chunk 40")
        return start

    with pytest.raises(ValueError, match="chunk 40"):
        hardware.on_row_chunks(work, 4000, 2, rows_per_task=8)
    assert len(calls) < 4000 // 8  # the other thread stopped taking chunks


def test_on_row_chunks_called_from_a_chunk_does_not_wait_on_itself():
    """A nested call from inside a pool thread (every pool thread busy) finishes: its helper,
    never started, is cancelled and the calling thread runs every chunk."""
    import concurrent.futures

    def inner(start, stop):
        return sum(hardware.on_row_chunks(lambda a, b: b - a, 64, 2, rows_per_task=4))

    with concurrent.futures.ThreadPoolExecutor(1) as runner:
        future = runner.submit(hardware.on_row_chunks, inner, 64, 2, 4)
        assert sum(future.result(timeout=60)) == 64 * len(future.result())

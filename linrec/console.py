"""What a command shows while it works and when it ends: aligned text tables whose columns
never run together, and progress on long work.

Progress goes to stderr. On a terminal it is a rich progress bar, redrawn in place and gone when
the work ends; elsewhere (a log file, a pipe, a SLURM job's output) it is one plain line at most
every `PLAIN_EVERY` seconds, so a log stays readable. `LINREC_PROGRESS=0` turns it off,
`LINREC_PROGRESS=plain` forces the plain lines.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")
#: seconds between two plain progress lines of one task
PLAIN_EVERY = 5.0
#: work shorter than this shows no progress at all
QUIET_BELOW = 2.0
PROGRESS_ENV = "LINREC_PROGRESS"


# ---------------------------------------------------------------------------------------------
# tables


def cell(value: Any, digits: int = 4) -> str:
    """A table cell: a number with `digits` decimals, '–' for None, 'diverged' for a value an
    estimator could not give, the text of anything else."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int,)) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}" if math.isfinite(value) else "–"
    return str(value)


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], *,
               left: int = 1, gap: int = 2) -> list[str]:
    """Lines of an aligned table: the first `left` columns left-aligned, the others right;
    every column as wide as its widest cell, columns `gap` spaces apart, so that two cells
    never run together whatever their values."""
    columns = len(header)
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(columns)]

    def line(cells: Sequence[str]) -> str:
        parts = [str(c).ljust(w) if i < left else str(c).rjust(w)
                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return (" " * gap).join(parts).rstrip()

    return [line(header), *(line(r) for r in rows)]


# ---------------------------------------------------------------------------------------------
# progress


def _mode() -> str:
    setting = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if setting in ("0", "off", "false", "no"):
        return "off"
    if setting == "plain":
        return "plain"
    return "bar" if sys.stderr.isatty() else "plain"


class _Live:
    """The one rich display every bar of the process shares (rich allows one live display at a
    time): started with the first bar, stopped when the last one closes."""

    display = None
    open_tasks = 0

    @classmethod
    def add(cls, label: str, total: int | None, done: int, state: str) -> int:
        if cls.display is None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            cls.display = RichProgress(TextColumn("{task.description}"), BarColumn(),
                                       MofNCompleteColumn(), TimeElapsedColumn(),
                                       TimeRemainingColumn(), TextColumn("{task.fields[state]}"),
                                       transient=True)
            cls.display.start()
        cls.open_tasks += 1
        return cls.display.add_task(label, total=total, completed=done, state=state)

    @classmethod
    def remove(cls, task: int) -> None:
        cls.display.remove_task(task)
        cls.open_tasks -= 1
        if cls.open_tasks == 0:
            cls.display.stop()
            cls.display = None


class Progress:
    """One task's progress: `advance(n)` after each step, `update(text)` for a line of state
    (an epoch's loss and validation value), `update(text, advance=1)` for a step that ends
    with its state (the line shown counts the step it describes). Made by `progress()`."""

    def __init__(self, label: str, total: int | None, unit: str) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.done = 0
        self.state = ""
        self.started = time.monotonic()
        self._last_line = self.started
        self._task: int | None = None

    def advance(self, n: int = 1) -> None:
        self.done += n
        self._show()

    def update(self, state: str, advance: int = 0) -> None:
        self.state = state
        self.done += advance
        self._show()

    def _show(self) -> None:
        now = time.monotonic()
        mode = _mode()
        if mode == "off" or now - self.started < QUIET_BELOW:
            return
        if mode == "bar":
            if self._task is None:
                self._task = _Live.add(self.label, self.total, self.done, self.state)
            _Live.display.update(self._task, completed=self.done, state=self.state)
            return
        if now - self._last_line >= PLAIN_EVERY:
            self._last_line = now
            of = f"/{self.total}" if self.total else ""
            state = f"; {self.state}" if self.state else ""
            print(f"linrec: {self.label}: {self.done}{of} {self.unit}, "
                  f"{now - self.started:.0f} s{state}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._task is not None:
            _Live.remove(self._task)
            self._task = None


@contextmanager
def progress(label: str, total: int | None = None, unit: str = "steps") -> Iterator[Progress]:
    """Progress of one piece of long work (see the module docstring); nothing is shown for work
    that ends within QUIET_BELOW seconds."""
    task = Progress(label, total, unit)
    try:
        yield task
    finally:
        task.close()


def tracked(items: Iterable[T], label: str, total: int | None = None,
            unit: str = "steps") -> Iterator[T]:
    """`items`, advancing a progress display by one per item."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with progress(label, total, unit) as task:
        for item in items:
            yield item
            task.advance()

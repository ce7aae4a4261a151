"""SIGTERM and SIGINT as an exception that a run catches to mark itself failed.

SIGTERM is how SLURM and most schedulers end a job at its time limit; SIGINT is Ctrl-C. Within
`signals_raise()` both raise `Interrupted` in the main thread, which `linrec.cli` turns into a
FAILED run and the exit status 128 + the signal's number.

A signal that lands inside a library's C++ code calling back into Python (torch.save writing a
checkpoint through a Python file object) can come out as that library's own error, with the
`Interrupted` only as its context. Two guards keep such a signal a signal:
`signals_deferred()` holds it back for the length of a write that must not be torn, and
`interrupt_behind(exc)` finds it behind another exception.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

#: the signals that stop a run
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_deferring = 0  # how many signals_deferred() blocks the main thread is in
_pending: list[int] = []  # the signals that arrived within them


class Interrupted(BaseException):  # noqa: N818 - a signal, like KeyboardInterrupt
    """A job was stopped by a signal (SIGTERM or SIGINT)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Within: SIGTERM and SIGINT raise Interrupted (the job's handler marks it failed); the
    previous handlers are restored after. A no-op outside the main thread."""
    if not _on_main_thread():
        yield
        return

    def handler(signum, frame):
        if _deferring:
            _pending.append(signum)
            return
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Within: a stop signal is held back, and raised as Interrupted when the block ends (or
    when the block fails: its own error then carries the Interrupted as context)."""
    global _deferring
    if not _on_main_thread():
        yield
        return
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if not _deferring and _pending:
            signum = _pending[0]
            _pending.clear()
            raise Interrupted(signum)


def interrupt_behind(exc: BaseException) -> Interrupted | None:
    """The Interrupted that `exc` is, or was raised while handling (its cause or context)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, Interrupted):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None

"""Leave a command's process as the interpreter would, less the teardown of its modules.

At exit the interpreter waits for the threads, runs the atexit handlers, flushes stdout and
stderr, and then tears down every imported module: for a run, which imports numpy, scipy,
Hydra and linrec's own modules, that last step alone is about 0.2 s of the default `linrec`
(experiments/LOG.md), a delay after the last line is printed that serves nothing. The console
scripts (`console_script`) end with `exit_now` instead, which does everything but that step.
A caller in a Python session calls the entry functions themselves, which return or raise as
any function does.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn


def exit_status(code: object) -> int:
    """The process's exit status for `sys.exit(code)`, as the interpreter reads it (a code that
    is neither None nor an int is printed to stderr and exits 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def exit_now(status: int) -> NoReturn:
    """Exit with `status` as the interpreter does (threads joined with their exit hooks, atexit
    handlers, logging shut down, stdout and stderr flushed), without its module teardown."""
    threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's own first step
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that left (`linrec ... | head`), a closed stream
            pass
    os._exit(status)


def console_script(entry: Callable[[], int | None]) -> Callable[[], NoReturn]:
    """The console script of `entry` (returns its exit status or None, or raises SystemExit):
    runs it and exits with its status through `exit_now`. Any other exception takes the
    interpreter's own way out (its traceback, the module teardown)."""

    def script() -> NoReturn:
        try:
            status = exit_status(entry())
        except SystemExit as stop:
            status = exit_status(stop.code)
        exit_now(status)

    script.__name__ = script.__qualname__ = f"{entry.__name__}_script"
    script.__doc__ = f"The console script of `{entry.__module__}.{entry.__name__}`."
    return script

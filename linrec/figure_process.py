"""A run's figures drawn by a child process started with the run.

Importing matplotlib and its PDF backend and drawing a first figure (fonts, caches) takes about
as long as drawing the run's figures themselves. A run that would import matplotlib only for
its figures starts `FigureProcess` before its data and fit: the child imports and warms the
renderer on a core that the fit and evaluation leave mostly idle, waits for the run's record on
its stdin, draws the figures into the run directory (every second one in a forked copy of
itself, since the waiting run leaves both cores free) and answers with the written paths on
its stdout. The figures read only the test split's part of the record
(`linrec.figure_record`), so a run scores that split first and sends its request then
(`FigureProcess.send`): the child draws while the other splits are scored, and the run waits
for what is left of the drawing at its end (timings: experiments/LOG.md).

The child only saves time, it never decides an outcome: whenever it cannot answer (it did not
start, it died, it raised), the run draws the figures itself, so an error is raised in the run
with its own traceback and the files are the same either way. The child ignores SIGINT (Ctrl-C
reaches the whole process group; the run decides), exits when its stdin closes (also when the
run is killed outright), and is ended by the run on every other way out.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from linrec.figure_record import figure_inputs

log = logging.getLogger("linrec")

#: the child's niceness: the fit's BLAS threads take both cores first (at 0 the default run's
#: EASE fit took 0.33 s instead of 0.14 s, the whole run 0.4-0.5 s more than at 5 or 10)
NICENESS = 10
#: seconds the run waits for an ended child to exit before killing it
_EXIT_WAIT = 5.0


def _package_root() -> str:
    """The directory that holds this linrec package: the child imports the same sources."""
    return str(Path(__file__).resolve().parents[1])


class FigureProcess:
    """`with FigureProcess(enabled) as figures: ... figures.draw(record, run_dir)`.

    enabled: False starts no child (`draw` then draws in-process, as for a child that failed).
    reuse_loaded: start none either when matplotlib is already imported in this process (a
    notebook, a process that drew before): drawing here is then as fast."""

    def __init__(self, enabled: bool = True, *, reuse_loaded: bool = True) -> None:
        self.enabled = enabled
        self.reuse_loaded = reuse_loaded
        self._child: subprocess.Popen[str] | None = None
        #: the request sent ahead by `send` (its JSON line), None when none was
        self._sent: str | None = None

    def __enter__(self) -> FigureProcess:
        loaded = self.reuse_loaded and "matplotlib.figure" in sys.modules
        if self.enabled and not loaded:
            self._child = _start_child()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close(stop=error is not None)

    @property
    def child_pid(self) -> int | None:
        """The child's process id while it runs (None: no child)."""
        return None if self._child is None else self._child.pid

    def send(self, record: Mapping[str, Any], run_dir: str | Path) -> None:
        """Have the child start drawing the figures of `record` (JSON-ready; a record of the
        figure split alone will do: `linrec.figure_record`) in `run_dir` now; `draw` then waits for
        them. Nothing happens without a child or when a request was sent already."""
        if self._child is None or self._sent is not None:
            return
        self._sent = self._request(record, Path(run_dir).resolve())
        self._write(self._child, self._sent)

    def draw(self, record: Mapping[str, Any], run_dir: str | Path) -> list[Path]:
        """The figures of the run record `record` (JSON-ready, as results.json holds it) in
        `run_dir`, by the child when it answers, else in this process: the written paths. A
        request sent ahead (`send`) is the child's answer only when it asked for these very
        figures; otherwise they are drawn here, after the child is done."""
        start = time.perf_counter()
        written = self._draw_in_child(record, Path(run_dir))
        if written is None:
            from linrec.plots import run_figures

            written = run_figures(record, run_dir)
            log.info("%d figure files drawn in %.2fs", len(written), time.perf_counter() - start)
        else:
            log.info("%d figure files drawn by the figure process; the run waited %.2fs",
                     len(written), time.perf_counter() - start)
        return written

    @staticmethod
    def _request(record: Mapping[str, Any], where: Path) -> str:
        """The child's request: the figures' part of `record`, drawn into `where` (absolute:
        the child may have another working directory by the time it draws)."""
        return json.dumps({"record": figure_inputs(record), "run_dir": str(where)})

    @staticmethod
    def _write(child: subprocess.Popen[str], request: str) -> None:
        """Send the child its one request and close its stdin (a child that has gone is left
        for `_draw_in_child` to find silent)."""
        assert child.stdin is not None
        try:
            child.stdin.write(request + "\n")
            child.stdin.close()
        except (OSError, ValueError):  # the child has gone: its pipe is broken
            pass

    def _draw_in_child(self, record: Mapping[str, Any], run_dir: Path) -> list[Path] | None:
        child, self._child = self._child, None
        sent, self._sent = self._sent, None
        if child is None:
            return None
        where = run_dir.resolve()
        request = self._request(record, where)
        if sent is None:
            self._write(child, request)
        try:
            assert child.stdout is not None
            answer = child.stdout.readline()
        except (OSError, ValueError):
            answer = ""
        finally:
            _end(child)
        try:
            paths = json.loads(answer)["written"] if answer else None
        except (ValueError, KeyError, TypeError):
            paths = None
        if paths is None:
            log.info("the figure process did not answer (exit %s); drawing in-process",
                     child.returncode)
            return None
        if sent is not None and sent != request:
            log.warning("the figures sent ahead were not the run's; drawing in-process")
            return None
        return [run_dir / Path(p).relative_to(where) for p in paths]  # as given, as in-process

    def close(self, stop: bool = False) -> None:
        """End the child, if one is still running (idempotent): let it exit, or with `stop`
        (the run failed or was interrupted) terminate it at once."""
        child, self._child = self._child, None
        if child is not None:
            if stop:
                child.terminate()
            _end(child)


def _start_child() -> subprocess.Popen[str] | None:
    code = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "  # first of all
            f"import sys; sys.path.insert(0, {_package_root()!r}); "
            "from linrec.figure_process import serve; serve()")
    try:
        return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, encoding="utf-8")
    except OSError as exc:  # no process to spare: the run draws its figures itself
        log.info("no figure process (%s); the run draws its figures itself", exc)
        return None


def _end(child: subprocess.Popen[str]) -> None:
    """Close the child's pipes and wait for it to exit; terminate it, then kill it, when it
    does not."""
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass
    try:
        child.wait(timeout=_EXIT_WAIT)
    except subprocess.TimeoutExpired:
        child.terminate()
        try:
            child.wait(timeout=_EXIT_WAIT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _warm_up() -> None:
    """Draw a small figure with what the run's figures use (log axes, markers, a legend, a
    title) to PNG and PDF in memory: imports the PDF backend and loads the fonts."""
    import io

    from matplotlib.figure import Figure

    from linrec.plots import log_scale, tight_box

    fig = Figure(figsize=(2.0, 2.0))
    ax = fig.add_subplot()
    ax.plot([1, 2, 3], [0.01, 0.1, 1.0], marker="o", label="warm-up")
    log_scale(ax, "y")
    ax.set_title("warm-up")
    ax.set_xlabel("K")
    ax.legend()
    box = tight_box(fig)
    for fmt in ("png", "pdf"):
        fig.savefig(io.BytesIO(), format=fmt, bbox_inches=box)


def _draw_on_two_cores(jobs: list[Callable[[], list[Path]]]) -> list[Path]:
    """Run the drawing jobs, every second one in a forked copy of this process (the run waits
    idle meanwhile, so a core is free): their paths, in the jobs' order. Raises when either
    side fails."""
    if len(jobs) < 2 or not hasattr(os, "fork"):
        return [path for job in jobs for path in job()]
    read, write = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the copy: draw jobs 1, 3, ..., send their paths, exit without teardown
        os.close(read)
        status = 1
        try:
            _die_with(parent)
            with os.fdopen(write, "w", encoding="utf-8") as out:
                json.dump([[str(p) for p in job()] for job in jobs[1::2]], out)
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    try:
        mine = [job() for job in jobs[0::2]]
        with os.fdopen(read, encoding="utf-8") as answer:
            theirs = answer.read()
    finally:
        _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("the forked figure process failed")
    drawn = [mine[k // 2] if k % 2 == 0 else [Path(p) for p in json.loads(theirs)[k // 2]]
             for k in range(len(jobs))]
    return [path for paths in drawn for path in paths]


def _die_with(parent: int) -> None:
    """Have this process killed when `parent` exits (Linux's PR_SET_PDEATHSIG), so that a
    forked copy never outlives the child the run ended (terminated or killed); exit now when
    the parent is gone already. Elsewhere nothing is set."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() != parent:
        os._exit(1)


def serve() -> None:
    """The child's side, at NICENESS: warm the renderer, read one request ({"record",
    "run_dir"}) from stdin, draw it, answer {"written": [paths]} on stdout. Exits quietly on
    an empty stdin (the run ended without figures); an error leaves the answer empty, so the
    run draws the figures itself and raises the error there."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # also when served by other means than the run
    # answers go to the real stdout; anything a library prints, to stderr
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    os.nice(NICENESS)
    try:
        _warm_up()
    except Exception:  # noqa: BLE001 - the run draws the figures itself and reports the error
        return
    line = sys.stdin.readline()
    if not line:
        return
    from linrec.plots import run_figure_jobs

    request = json.loads(line)
    try:
        written = _draw_on_two_cores(run_figure_jobs(request["record"], request["run_dir"]))
    except Exception:  # noqa: BLE001 - as above
        return
    answers.write(json.dumps({"written": [str(p) for p in written]}) + "\n")
    answers.flush()
    os._exit(0)  # nothing is left to flush or close: skip the interpreter's teardown

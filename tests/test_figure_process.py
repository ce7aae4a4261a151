"""linrec.figure_process: a run's figures drawn by a child process, the same files as drawn
in-process, the run drawing them itself whenever the child cannot, and no process left."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from linrec.figure_process import NICENESS, FigureProcess
from linrec.figure_record import figure_inputs
from linrec.plots import run_figures
from tests.conftest import child_processes, proc_stat, run_command
from tests.test_plots import FIGURE_FILES, figure_record

#: how long a test waits for a process to go (a guard against a hang, not a timing)
GUARD = 30.0


@pytest.fixture(autouse=True)
def fixed_pdf_date(monkeypatch):
    """PDFs carry their creation date; a fixed one (read by matplotlib, inherited by the child)
    lets two drawings be compared byte for byte."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")


def _gone(pid: int) -> bool:
    """The process has exited (reaped, or a zombie waiting for a parent that is gone)."""
    try:
        state = proc_stat(pid)[0]
    except OSError:
        return True
    return state in ("Z", "X")


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + GUARD
    while not _gone(pid):
        assert time.monotonic() < deadline, f"process {pid} is still running"
        time.sleep(0.05)


def _niceness(pid: int) -> int:
    return int(proc_stat(pid)[16])


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_the_child_draws_the_files_the_run_draws_itself(tmp_path, caplog):
    record = figure_record()
    reference = tmp_path / "in_process"
    reference.mkdir()
    run_figures(record, reference)
    drawn = tmp_path / "child"
    drawn.mkdir()
    with caplog.at_level(logging.INFO, logger="linrec"), \
            FigureProcess(reuse_loaded=False) as figures:
        pid = figures.child_pid
        assert pid is not None and pid != os.getpid()
        deadline = time.monotonic() + GUARD
        while _niceness(pid) == os.nice(0):  # until the child has lowered its priority
            assert time.monotonic() < deadline, "the child kept the run's priority"
            time.sleep(0.01)
        assert _niceness(pid) == min(19, os.nice(0) + NICENESS)
        written = figures.draw(record, drawn)
        assert figures.child_pid is None
    assert "drawn by the figure process" in caplog.text
    assert sorted(p.name for p in written) == FIGURE_FILES
    assert all(p.parent == drawn for p in written)
    assert _files(drawn) == _files(reference)
    _wait_gone(pid)


def test_a_child_that_died_leaves_the_drawing_to_the_run(tmp_path, caplog):
    record = figure_record()
    with caplog.at_level(logging.INFO, logger="linrec"), \
            FigureProcess(reuse_loaded=False) as figures:
        os.kill(figures.child_pid, signal.SIGKILL)
        _wait_gone(figures.child_pid)
        written = figures.draw(record, tmp_path)
    assert "did not answer" in caplog.text and "drawn by the figure process" not in caplog.text
    assert sorted(p.name for p in written) == FIGURE_FILES == sorted(os.listdir(tmp_path))


def test_an_error_in_the_child_is_raised_by_the_run_drawing_itself(tmp_path, caplog):
    """A record that cannot be drawn (curves of different lengths): the child answers nothing,
    and the run raises matplotlib's own error from its own drawing."""
    record = figure_record()
    record["splits"]["test"]["sampled"]["n=100"]["curves"]["naive"]["ndcg"] = [0.1, 0.2]
    with pytest.raises(ValueError, match="same first dimension") as expected:
        run_figures(record, tmp_path / "reference")
    with caplog.at_level(logging.INFO, logger="linrec"), \
            FigureProcess(reuse_loaded=False) as figures:
        pid = figures.child_pid
        with pytest.raises(ValueError) as raised:
            figures.draw(record, tmp_path)
    assert str(raised.value) == str(expected.value)
    assert "did not answer" in caplog.text
    _wait_gone(pid)


def _ignores_sigint(pid: int) -> bool:
    ignored = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("SigIgn:"))
    return bool(int(ignored.split()[1], 16) >> (signal.SIGINT - 1) & 1)


def test_ctrl_c_reaches_the_run_not_the_child(tmp_path, caplog):
    """SIGINT reaches a terminal's whole process group; the child ignores it (from its first
    statement on) and still draws."""
    with caplog.at_level(logging.INFO, logger="linrec"), \
            FigureProcess(reuse_loaded=False) as figures:
        deadline = time.monotonic() + GUARD
        while not _ignores_sigint(figures.child_pid):
            assert time.monotonic() < deadline, "the child never ignored SIGINT"
            time.sleep(0.01)
        os.kill(figures.child_pid, signal.SIGINT)
        time.sleep(0.5)
        assert not _gone(figures.child_pid)
        written = figures.draw(figure_record(), tmp_path)
    assert "drawn by the figure process" in caplog.text
    assert sorted(p.name for p in written) == FIGURE_FILES


def test_a_failed_run_leaves_no_child():
    with pytest.raises(RuntimeError, match="the fit failed"), \
            FigureProcess(reuse_loaded=False) as figures:
        pid = figures.child_pid
        raise RuntimeError("the fit failed")
    assert _gone(pid) and figures.child_pid is None


def test_without_figures_or_with_matplotlib_loaded_no_child_starts(tmp_path):
    with FigureProcess(enabled=False, reuse_loaded=False) as figures:
        assert figures.child_pid is None
    assert "matplotlib.figure" in sys.modules  # imported by linrec.plots above
    with FigureProcess() as figures:
        assert figures.child_pid is None
        written = figures.draw(figure_record(), tmp_path)
    assert sorted(p.name for p in written) == FIGURE_FILES


def test_the_child_exits_when_the_run_is_killed_outright():
    """SIGKILL leaves the run no way to end its child: the child sees its stdin close."""
    code = ("import time; from linrec.figure_process import NICENESS, FigureProcess\n"
            "with FigureProcess() as figures:\n"
            "    print(figures.child_pid, flush=True)\n"
            "    time.sleep(600)\n")
    run = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child = int(run.stdout.readline())
        assert not _gone(child)
        run.kill()
        run.wait(timeout=GUARD)
        _wait_gone(child)
    finally:
        run.kill()
        run.stdout.close()


def _job(k: int, fail: bool = False):
    def draw() -> list[Path]:
        if fail:
            raise ValueError(f"job {k} failed")
        return [Path(f"{k}.png"), Path(f"{k}-{os.getpid()}.pid")]
    return draw


def test_every_second_job_is_drawn_by_a_forked_copy_and_the_order_kept():
    from linrec.figure_process import _draw_on_two_cores

    paths = _draw_on_two_cores([_job(k) for k in range(5)])
    assert [p.name for p in paths[::2]] == [f"{k}.png" for k in range(5)]
    pids = [int(p.stem.split("-")[1]) for p in paths[1::2]]
    assert pids[0::2] == [os.getpid()] * 3 and len(set(pids[1::2])) == 1
    assert pids[1] != os.getpid()
    assert [p.name for p in _draw_on_two_cores([_job(7)])] == ["7.png", f"7-{os.getpid()}.pid"]


@pytest.mark.parametrize("failing", [0, 1], ids=["here", "in the copy"])
def test_a_failed_job_on_either_side_fails_the_drawing(failing):
    from linrec.figure_process import _draw_on_two_cores

    jobs = [_job(k, fail=k == failing) for k in range(3)]
    expected = ValueError if failing == 0 else RuntimeError
    with pytest.raises(expected, match="job 0 failed" if failing == 0 else "forked"):
        _draw_on_two_cores(jobs)
    assert not _zombie_children()  # the copy was waited for


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
def test_a_forked_copy_does_not_outlive_the_child(stop):
    """The run ends its figure child while the child's forked copy draws (a run stopped by a
    signal after sending its figures ahead): the copy goes with the child."""
    code = ("import os, sys, time\n"
            "from pathlib import Path\n"
            "from linrec.figure_process import _draw_on_two_cores\n"
            "def slow():\n"
            "    time.sleep(120)\n"
            "    return [Path('never')]\n"
            "print(os.getpid(), flush=True)\n"
            "_draw_on_two_cores([slow, slow])\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    copies = []
    try:
        pid = int(child.stdout.readline())
        deadline = time.monotonic() + GUARD
        while not copies:
            assert time.monotonic() < deadline, "the child forked no copy"
            copies = [p for p, state in child_processes(pid) if state != "Z"]
            time.sleep(0.01)
        child.send_signal(stop)
        child.wait(timeout=GUARD)
        _wait_gone(copies[0])
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
        for copy in copies:
            if not _gone(copy):
                os.kill(copy, signal.SIGKILL)


def _zombie_children() -> list[int]:
    return [child for child, state in child_processes(os.getpid()) if state == "Z"]


def test_a_relative_run_directory_is_the_runs_not_the_childs(tmp_path, monkeypatch):
    """The child keeps the working directory it started in; a run that changed its own since
    (Hydra's job.chdir) still gets its figures where it asked, named as it asked."""
    started_in, run_from = tmp_path / "start", tmp_path / "job"
    started_in.mkdir()
    run_from.mkdir()
    monkeypatch.chdir(started_in)
    with FigureProcess(reuse_loaded=False) as figures:
        monkeypatch.chdir(run_from)
        written = figures.draw(figure_record(), Path("run"))
    assert sorted(str(p) for p in written) == sorted(f"run/{name}" for name in FIGURE_FILES)
    assert sorted(os.listdir(run_from / "run")) == FIGURE_FILES
    assert not (started_in / "run").exists()


def _test_split_alone(record: dict) -> dict:
    """What a run sends ahead: a record of its test split alone (the figures' split), with
    the training log and the selection metric."""
    return {"splits": {"test": record["splits"]["test"]}, "selection": record["selection"],
            "training": record["training"]}


def _whole_run(record: dict) -> dict:
    """`record` as a whole run's results.json holds it: a validation split before the test
    split, the selection block, and fields the figures do not read."""
    valid = {"n_users": 3, "exact": {"ndcg@10": 0.2},
             "sampled": {"n=100": {"curves": {"exact": {"ndcg": [0.5, 0.6]}}}}}
    test = {"n_users": 4, "exact": {"ndcg@10": 0.3}, **record["splits"]["test"]}
    return {**record, "splits": {"valid": valid, "test": test}, "model": "ease",
            "selection": {"metric": "ndcg@10", "split": "valid", "value": 0.2}}


def test_figure_inputs_are_the_test_split_else_the_first():
    whole = _whole_run(figure_record())
    inputs = figure_inputs(whole)
    assert inputs == {"splits": {"test": {"sampled": whole["splits"]["test"]["sampled"]}},
                      "selection": {"metric": "ndcg@10"}, "training": whole["training"]}
    assert figure_inputs(_test_split_alone(whole)) == inputs == figure_inputs(inputs)
    no_test = {"splits": {"valid": whole["splits"]["valid"], "other": {}}}
    assert figure_inputs(no_test) == {"splits": {"valid": {"sampled": no_test["splits"][
        "valid"]["sampled"]}}, "training": None}
    assert figure_inputs({}) == {"splits": {}, "training": None}


def test_figures_sent_ahead_are_the_files_of_the_whole_run(tmp_path, caplog):
    """A request sent ahead with the test split alone: the child's files are those the run
    draws in-process from its whole record (byte for byte), in a directory the request made."""
    whole = _whole_run(figure_record())
    reference = tmp_path / "in_process"
    run_figures(whole, reference)
    drawn = tmp_path / "not_yet" / "run"
    with caplog.at_level(logging.INFO, logger="linrec"), \
            FigureProcess(reuse_loaded=False) as figures:
        figures.send(_test_split_alone(whole), drawn)
        figures.send({"splits": {}}, tmp_path / "ignored")  # one request per child
        written = figures.draw(whole, drawn)
    assert "drawn by the figure process" in caplog.text
    assert sorted(p.name for p in written) == FIGURE_FILES and not (tmp_path / "ignored").exists()
    assert _files(drawn) == _files(reference)


@pytest.mark.parametrize("change", ["a curve", "the directory"])
def test_figures_sent_ahead_that_are_not_the_runs_are_drawn_again(tmp_path, caplog, change):
    """A request sent ahead that differs from the run's record (another curve, another
    directory): the run waits for the child, then draws its own figures in-process."""
    whole = _whole_run(figure_record())
    ahead = json_copy(_test_split_alone(whole))
    run_dir, ahead_dir = tmp_path / "run", tmp_path / "run"
    if change == "a curve":
        ahead["splits"]["test"]["sampled"]["n=100"]["curves"]["mle"]["ndcg"][3] = 0.9
    else:
        ahead_dir = tmp_path / "elsewhere"
    reference = tmp_path / "in_process"
    run_figures(whole, reference)
    with caplog.at_level(logging.INFO, logger="linrec"), \
            FigureProcess(reuse_loaded=False) as figures:
        pid = figures.child_pid
        figures.send(ahead, ahead_dir)
        written = figures.draw(whole, run_dir)
    assert "were not the run's; drawing in-process" in caplog.text
    assert sorted(p.name for p in written) == FIGURE_FILES
    assert _files(run_dir) == _files(reference)
    _wait_gone(pid)


def json_copy(value):
    import json

    return json.loads(json.dumps(value))


#: the run pauses in its second split's evaluation (the validation split, scored after the test
#: split whose figures were sent ahead) and says so in a file
PAUSE_IN_THE_SECOND_SPLIT = """
import importlib, pathlib, time
_evaluate = importlib.import_module("linrec.eval.evaluate")
_real, _calls = _evaluate.evaluate_exact, []
def _pausing(*args, **kwargs):
    _calls.append(1)
    if len(_calls) == 2:
        pathlib.Path("paused").write_text("")
        time.sleep(600)
    return _real(*args, **kwargs)
_evaluate.evaluate_exact = _pausing
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_run_stopped_after_sending_its_figures_ahead_leaves_no_process(tmp_path, signum):
    """The run is stopped while it scores its validation split, its test split's figures sent
    to the figure process: it exits 128 + n with its run marked FAILED, no results.json, and
    nothing of it left running (the figure process and its forked copy included)."""
    proc = run_command(tmp_path, "hydra.run.dir=run", "data.source.n_users=400",
                       "data.source.n_items=150", "eval.sampled.repeats=2",
                       "eval.sampled.sample_sizes=[20]", wait=False,
                       prelude=PAUSE_IN_THE_SECOND_SPLIT)
    deadline = time.monotonic() + 300
    while not (tmp_path / "paused").exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the run never reached its second split"
        time.sleep(0.05)
    assert [p for p, state in child_processes(proc.pid) if state != "Z"], "no figure process"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, err
    assert f"interrupted by {name}" in (tmp_path / "run" / "FAILED").read_text()
    assert not (tmp_path / "run" / "results.json").exists()

    def left() -> list[str]:
        found = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True)
        return found.stdout.split()

    deadline = time.monotonic() + GUARD
    while left():
        assert time.monotonic() < deadline, f"processes of the run left: {left()}"
        time.sleep(0.05)

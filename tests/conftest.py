"""Stand-ins shared by the tests of every package: scorers with known scores, a random
evaluation set, the config `linrec` composes and the one way to run linrec's commands
(import them with `from tests.conftest import ...`); every test gets its own empty
$LINREC_DATA. A test that runs a command in a subprocess is marked `slow` here, so that
`pytest -m "not slow"` is a fast inner loop."""

from __future__ import annotations

import atexit
import dis
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.data.splits import EvalSet
from tests.forkserver import Finished, ForkServer


def compose_config(*overrides: str):
    """The config the `linrec` command composes for these overrides (Hydra's DictConfig)."""
    from hydra import compose, initialize_config_dir

    from linrec.cli import config_dir
    from linrec.config import register_configs
    from linrec.hydra_compat import version_base

    register_configs()
    with initialize_config_dir(config_dir=config_dir(), **version_base()):
        return compose(config_name="config", overrides=list(overrides))


#: the console scripts as Python code (the installed scripts run the same functions)
COMMANDS = {
    "linrec": "from linrec.cli import linrec_script; linrec_script()",
    "linrec-report": "from linrec.cli import report_script; report_script()",
    "linrec-recommend": "from linrec.cli import recommend_script; recommend_script()",
    "linrec-evaluate": "from linrec.cli import evaluate_script; evaluate_script()",
}


_server: ForkServer | None = None


def fork_server() -> ForkServer:
    """The session's preloaded interpreter (tests/forkserver.py), started on first use."""
    global _server
    if _server is None:
        _server = ForkServer(dict(os.environ))
        atexit.register(_server.close)
    return _server


def run_command(cwd: Path, *args: str, command: str = "linrec", prelude: str = "",
                wait: bool = True, timeout: float = 600, env: dict[str, str] | None = None,
                ) -> Finished | subprocess.Popen:
    """`command ARGS` as `python -c` in cwd, with its own cache under cwd, as a user runs it
    (`prelude`: Python code run first, to inject a fault; `env`: extra variables).
    wait=False: the running process, a fresh interpreter in its own session (so that a signal
    reaches every child); else the finished one, forked from the preloaded interpreter;
    `timeout` only guards against a hang."""
    Path(cwd).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, LINREC_DATA=str(Path(cwd) / "cache"), HYDRA_FULL_ERROR="0",
               **(env or {}))
    code = prelude + COMMANDS[command]
    if not wait:
        return subprocess.Popen([sys.executable, "-c", code, *args], cwd=cwd, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    started = time.time()
    done = fork_server().run(code, list(args), Path(cwd), env, timeout)
    check_new_records(Path(cwd), since=started)
    return done


def proc_stat(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command's name: the state, the parent's id, ... (fields 3 on
    of proc(5)). OSError when the process is gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def child_processes(pid: int) -> list[tuple[int, str]]:
    """(id, state) of every process whose parent is `pid`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = proc_stat(int(stat.parent.name))
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append((int(stat.parent.name), fields[0]))
    return found


def check_new_records(root: Path, since: float) -> None:
    """Every results.json written below `root` after `since` matches the documented schema
    (linrec.results_schema), so that the reference cannot drift from what runs write."""
    from linrec.results_schema import schema_problems

    for path in root.rglob("results.json"):
        if path.stat().st_mtime >= since:
            problems = schema_problems(json.loads(path.read_text()))
            assert not problems, f"{path} does not match the results.json schema:\n" + \
                "\n".join(problems)


#: names whose use means a test starts a process (a command, pip, a child interpreter)
_PROCESS_NAMES = frozenset({"run_command", "run_linrec", "linrec", "subprocess", "cli_run"})
#: fixtures that run commands to build what their tests read
_COMMAND_FIXTURES = frozenset({"comparison", "studies", "saved_run", "documented_env"})


def _names_used(code: types.CodeType) -> set[str]:
    """The names a test's code reads (its nested functions' too); importing from the package
    (`from linrec import hardware`) is not a use of the name `linrec`, the command."""
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opcode in dis.hasname
             and not (ins.opname == "IMPORT_NAME" and ins.argval.split(".")[0] == "linrec")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_used(const)
    return names


#: The suite runs on pytest-xdist workers, one per core (`-n auto --dist loadfile` in
#: pyproject.toml). A file is one unit of work, so that its module fixtures run once, and
#: tests/report/ is one unit, since its session fixtures build runs that all its files read;
#: each test of a file in _SHARED_OUT is a unit of its own (a documented page is minutes of
#: commands). The units that take longest go first, so that the workers finish together.
_WHOLE_UNITS = ("tests/report/",)
_SHARED_OUT = ("tests/test_documented_commands.py",)
_LONGEST_FIRST = ("tests/test_documented_commands.py", "tests/test_install.py", "tests/report/",
                  "tests/test_slurm.py", "tests/test_external.py", "tests/test_sweeps.py",
                  "tests/test_plugins.py", "tests/test_cli.py", "tests/studies/")


def _work_unit(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    if path in _SHARED_OUT:
        return nodeid
    return next((unit for unit in _WHOLE_UNITS if path.startswith(unit)), path)


def _schedule_rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::")[0]
    return next((rank for rank, prefix in enumerate(_LONGEST_FIRST) if path.startswith(prefix)),
                len(_LONGEST_FIRST))


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` with the units of `_work_unit`: tests/report/ whole, each documented
    page apart."""
    if config.getvalue("dist") != "loadfile":
        return None  # another mode, asked for on the command line: xdist's own
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    return WorkUnitScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        function = getattr(item, "function", None)
        if function is None:
            continue
        if _names_used(function.__code__) & _PROCESS_NAMES or \
                _COMMAND_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    items.sort(key=_schedule_rank)  # stable: collection order within a rank


@pytest.fixture(params=["cpu", "cuda"])
def device(request) -> str:
    """The torch device a torch model's test runs on: every such test runs on the CPU, and again
    on a CUDA device where there is one (skipped where there is none)."""
    if request.param == "cuda":
        import torch

        if not torch.cuda.is_available():
            pytest.skip("no CUDA device")
    return request.param


@pytest.fixture(autouse=True)
def _isolated_cache_home(tmp_path_factory, monkeypatch):
    """No test reads or writes the user's cache (splits, spectra, checkpoints): each gets an
    empty $LINREC_DATA (tests that need one of their own set it again)."""
    monkeypatch.setenv("LINREC_DATA", str(tmp_path_factory.mktemp("linrec-data")))


class FixedScores:
    """A stand-in model whose scores are a fixed matrix, row = user id (`users` given) or fold-in
    row (`users=None`); integer-valued matrices make ties on purpose."""

    def __init__(self, scores: np.ndarray) -> None:
        self.scores = scores

    def score(self, foldin: sp.csr_matrix, users: np.ndarray | None = None) -> np.ndarray:
        rows = np.arange(foldin.shape[0]) if users is None else users
        return self.scores[rows].copy()


class LinearScores:
    """score = foldin @ W (+ 0.5 * user id when users are given); records the users it saw.
    decimals: round scores to make ties; dtype: output dtype."""

    def __init__(self, n_items: int, seed: int = 0, decimals: int | None = None,
                 dtype: type = np.float64) -> None:
        self.w = np.random.default_rng(seed).normal(size=(n_items, n_items))
        self.decimals, self.dtype = decimals, dtype
        self.seen_users: list = []

    def score(self, foldin, users=None):
        self.seen_users.append(None if users is None else np.asarray(users).copy())
        scores = np.asarray(foldin @ self.w)
        if users is not None:
            scores = scores + 0.5 * np.asarray(users)[:, None]
        if self.decimals is not None:
            scores = np.round(scores, self.decimals)
        return scores.astype(self.dtype)


def make_evalset(n_users: int, n_items: int, seed: int, foldin_p: float = 0.3,
                 target_p: float = 0.15, min_targets: int = 0) -> EvalSet:
    """Random fold-in / target rows (disjoint); users are shuffled ids."""
    rng = np.random.default_rng(seed)
    foldin = rng.random((n_users, n_items)) < foldin_p
    targets = (rng.random((n_users, n_items)) < target_p) & ~foldin
    for u in range(n_users):  # test data builder, not library code
        free = np.flatnonzero(~foldin[u] & ~targets[u])
        need = min(max(0, min_targets - targets[u].sum()), len(free))
        targets[u, rng.choice(free, need, replace=False)] = True
    users = rng.permutation(10 * n_users)[:n_users].astype(np.int64)
    return EvalSet(users=users, foldin=sp.csr_matrix(foldin.astype(np.float32)),
                   targets=sp.csr_matrix(targets.astype(np.float32)))

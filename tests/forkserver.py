"""Run commands as `python -c CODE ARGS` would, but forked from an interpreter that has already
imported torch, numba, Hydra and linrec: each command then starts in a fraction of a second
instead of the seconds those imports take (most of the time of the tests that run commands).

A `ForkServer` is one such interpreter, running one command at a time: `run(code, args, cwd,
env)` forks a child that takes `env` as its environment, `cwd` as its directory and
`["-c", *args]` as its argv, runs `code` as `__main__` and exits as the interpreter would
(threads' exit hooks and atexit handlers run, buffers are flushed; only the teardown of the
modules is skipped: `linrec.process_exit.exit_now`, as the console scripts exit); the caller
gets the exit status and the child's stdout and stderr.
Nothing is computed before the fork but Hydra's ConfigStore (`register_configs`, which a
command's own call then finds done), the module-to-distribution map of linrec.results and
numba's type registries, so no thread pool (OpenMP, numba) exists yet to be lost in the child;
a module that reads the environment at import reads the server's, which is the caller's base
environment. The child puts the entries of its own $PYTHONPATH on sys.path, as an interpreter's
start would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

#: what the server imports before it forks: every module of linrec (and so its dependencies;
#: not torch._dynamo, which linrec's optimizers keep out of a run) and numba's registries
PRELOADED = ("linrec", "numba.np.npyimpl")

SERVER = r'''
import importlib, json, os, signal, sys, time, traceback
import pkgutil
for name in sys.argv[2:]:
    module = importlib.import_module(name)
    if name == "linrec":  # every module of the package
        for found in pkgutil.walk_packages(module.__path__, "linrec."):
            importlib.import_module(found.name)
        importlib.import_module("linrec.config").register_configs()  # a command's own is a no-op
        # which distribution provides each module: every results.json names the libraries a run
        # imported, and building this map reads every installed distribution's file list
        importlib.import_module("linrec.results")._module_distributions()
    if name == "numba.np.npyimpl":
        # numba's typing and target registries, loaded (cffi's parser among them) the first
        # time a kernel is loaded from its cache: about 0.2 s a command otherwise; no threads
        from numba.core.registry import cpu_target
        cpu_target.typing_context.refresh()
        cpu_target.target_context.refresh()
from linrec.process_exit import exit_now, exit_status
requests, replies = sys.stdin, os.fdopen(int(sys.argv[1]), "w")


def child(request):
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    replies.close()
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # what the interpreter's start does with PYTHONPATH: its entries after the script's
        # directory ('' for -c), before the standard library
        added = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                 if p and p not in sys.path]
        sys.path[1:1] = added
        sys.argv = ["-c", *request["args"]]
        exec(compile(request["code"], "<string>", "exec"),
             {"__name__": "__main__", "__builtins__": __builtins__})
        status = 0
    except SystemExit as stop:  # as the interpreter reads it
        status = exit_status(stop.code)
    except BaseException:
        traceback.print_exc()
        status = 1
    exit_now(status)  # the interpreter's exit, less the teardown of ~3 500 modules


for line in requests:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        child(request)
    deadline = time.time() + request["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.time() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = -1
            break
        time.sleep(0.01)
    code = os.waitstatus_to_exitcode(status) if status != -1 else None
    replies.write(json.dumps({"returncode": code}) + "\n")
    replies.flush()
'''


@dataclass
class Finished:
    """What subprocess.run gives, for the fields the tests read."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


class ForkServer:
    """One preloaded interpreter (see the module docstring); `close()` ends it."""

    def __init__(self, env: dict[str, str], modules: tuple[str, ...] = PRELOADED) -> None:
        read, write = os.pipe()
        self._outputs = Path(tempfile.mkdtemp(prefix="forkserver_"))
        self._log = self._outputs / "server.log"  # the server's own errors (an import failing)
        with open(self._log, "w") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-c", SERVER, str(write), *modules], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=log, env=env, text=True, pass_fds=(write,))
        os.close(write)
        self._replies = os.fdopen(read)
        self._lock = threading.Lock()  # one command at a time

    def run(self, code: str, args: list[str], cwd: Path, env: dict[str, str],
            timeout: float = 900) -> Finished:
        """`python -c code *args` in `cwd` with environment `env`; a child past `timeout`
        seconds is killed and raises TimeoutError."""
        with self._lock:
            return self._run(code, args, cwd, env, timeout)

    def _run(self, code: str, args: list[str], cwd: Path, env: dict[str, str],
             timeout: float) -> Finished:
        stdout, stderr = self._outputs / "stdout", self._outputs / "stderr"
        request = {"code": code, "args": list(args), "cwd": str(cwd), "env": dict(env),
                   "stdout": str(stdout), "stderr": str(stderr), "timeout": timeout}
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        line = self._replies.readline()
        if not line:
            raise RuntimeError(f"the fork server stopped (exit {self._process.wait(60)}):\n"
                               f"{self._log.read_text(errors='replace')[-3000:]}")
        returncode = json.loads(line)["returncode"]
        if returncode is None:
            raise TimeoutError(f"python -c … {' '.join(args)} ran past {timeout} s")
        return Finished(["-c", *args], returncode, stdout.read_text(errors="replace"),
                        stderr.read_text(errors="replace"))

    def close(self) -> None:
        self._process.stdin.close()
        self._process.wait(timeout=60)
        self._replies.close()
        for path in self._outputs.iterdir():
            path.unlink()
        self._outputs.rmdir()

"""linrec.process_exit: a console script exits with the status the interpreter would give, after
everything the interpreter's exit does (threads joined, atexit handlers, logging, buffered
output), and without the teardown of the modules."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

#: a module-level object whose finalizer speaks when the modules are torn down, a non-daemon
#: thread that finishes after the entry returned, an atexit handler, a log line to a file and
#: output left in stdout's buffer
PRELUDE = textwrap.dedent("""
    import atexit, logging, sys, threading, time
    from linrec.process_exit import console_script

    class Teardown:
        def __del__(self):
            sys.__stderr__.write("modules torn down\\n")

    KEPT = Teardown()

    def late():
        time.sleep(0.3)
        print("thread done", end="")

    logging.basicConfig(filename=sys.argv[1], level=logging.INFO)
    atexit.register(lambda: print(" atexit ran", end=""))
""")


#: the environment of the commands, with stdout buffered as it is by default
BUFFERED = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def _run(body: str, script: bool, tmp_path) -> subprocess.CompletedProcess:
    ending = "console_script(entry)()" if script else "sys.exit(entry())"
    code = PRELUDE + textwrap.dedent(body) + ending
    return subprocess.run([sys.executable, "-c", code, str(tmp_path / "log.txt")],
                          capture_output=True, text=True, timeout=60, env=BUFFERED)


BODIES = {
    "returns 3": """
        def entry():
            threading.Thread(target=late).start()
            logging.getLogger("x").info("logged")
            print("entry ", end="")
            return 3
    """,
    "returns None": """
        def entry():
            print("entry ", end="")
    """,
    "sys.exit(4)": """
        def entry():
            print("entry ", end="")
            sys.exit(4)
    """,
    "sys.exit('a message')": """
        def entry():
            print("entry ", end="")
            sys.exit("a message")
    """,
}


@pytest.mark.parametrize("case", list(BODIES))
def test_a_console_script_exits_as_the_interpreter_without_the_teardown(tmp_path, case):
    plain = _run(BODIES[case], script=False, tmp_path=tmp_path)
    script = _run(BODIES[case], script=True, tmp_path=tmp_path)
    assert script.returncode == plain.returncode == {"returns 3": 3, "returns None": 0,
                                                      "sys.exit(4)": 4,
                                                      "sys.exit('a message')": 1}[case]
    assert script.stdout == plain.stdout
    assert script.stdout.startswith("entry ") and script.stdout.endswith(" atexit ran")
    if case == "returns 3":
        assert script.stdout == "entry thread done atexit ran"
        assert "logged" in (tmp_path / "log.txt").read_text()
    assert "modules torn down" in plain.stderr and "modules torn down" not in script.stderr
    assert script.stderr == plain.stderr.replace("modules torn down\n", "")


def test_an_exception_takes_the_interpreters_way_out(tmp_path):
    body = """
        def entry():
            raise ValueError("broken")
    """
    script = _run(body, script=True, tmp_path=tmp_path)
    assert script.returncode == 1
    assert "ValueError: broken" in script.stderr and "modules torn down" in script.stderr


def test_a_reader_that_left_does_not_change_the_status(tmp_path):
    """`linrec ... | head`: the reader has left when stdout's buffer is flushed at exit; the
    status stays the entry's and nothing is printed about it."""
    code = textwrap.dedent("""
        import time
        from linrec.process_exit import console_script
        def entry():
            print("left in the buffer", end="")
            time.sleep(0.5)  # the reader leaves meanwhile
            return 0
        console_script(entry)()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=BUFFERED)
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == ""
    proc.stderr.close()


def test_the_installed_scripts_are_the_console_scripts():
    """pyproject.toml's console scripts name the functions that exit through process_exit."""
    from pathlib import Path

    import tomllib

    import linrec.cli as cli

    scripts = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())[
        "project"]["scripts"]
    assert scripts == {"linrec": "linrec.cli:linrec_script",
                       "linrec-report": "linrec.cli:report_script",
                       "linrec-recommend": "linrec.cli:recommend_script",
                       "linrec-evaluate": "linrec.cli:evaluate_script"}
    assert [getattr(cli, target.partition(":")[2]).__name__ for target in scripts.values()] == [
        "main_script", "report_main_script", "recommend_main_script", "evaluate_main_script"]

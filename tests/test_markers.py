"""The `slow` marker that tests/conftest.py gives a test by what its code names: a test that
runs a command is slow; one that only imports from the package is not (the fast loop and the
mutation run skip slow tests)."""

from tests.conftest import _PROCESS_NAMES, _names_used, run_command


def _imports_from_the_package():
    from linrec import hardware

    return hardware.cpu_cores()


def _runs_the_command(tmp_path):
    return run_command(["linrec", "--version"], cwd=tmp_path)


def _imports_subprocess():
    import subprocess

    return subprocess.run(["true"], check=True)


def _calls_a_helper_inside():
    def inner(tmp_path):
        return run_command(["linrec-report", str(tmp_path)])

    return inner


def test_importing_from_the_package_does_not_make_a_test_slow():
    assert not _names_used(_imports_from_the_package.__code__) & _PROCESS_NAMES


def test_running_a_command_or_a_child_process_does():
    for function in (_runs_the_command, _imports_subprocess, _calls_a_helper_inside):
        assert _names_used(function.__code__) & _PROCESS_NAMES, function.__name__

"""linrec.lazy_exports: a package's names imported when first read, then kept."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_a_name_is_imported_from_its_module_when_first_read_and_kept(tmp_path):
    """A package of two modules, `thing` defining the function `thing` (a namesake, like
    linrec.eval.evaluate) and `other`: in a fresh interpreter, nothing is imported until a
    name is read; the namesake stays the function after its module is imported."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from linrec.lazy_exports import lazy_exports\n"
        "__all__ = lazy_exports(__name__, {'pkg.thing': ('thing', 'helper'),\n"
        "                                  'pkg.other': ('Other',)})\n")
    (package / "thing.py").write_text("def thing():\n    return 1\n\n\n"
                                      "def helper():\n    return 2\n")
    (package / "other.py").write_text("class Other:\n    pass\n")
    code = """
import sys
import pkg
assert pkg.__all__ == ["Other", "helper", "thing"], pkg.__all__
assert "pkg.thing" not in sys.modules and "pkg.other" not in sys.modules
assert {"Other", "helper", "thing"} <= set(dir(pkg))
assert pkg.helper() == 2 and "pkg.thing" in sys.modules and "pkg.other" not in sys.modules
assert callable(pkg.thing) and pkg.thing() == 1, pkg.thing
from pkg import thing
assert thing() == 1
import pkg.thing
assert sys.modules["pkg.thing"].helper is pkg.helper and pkg.thing() == 1
from pkg import Other
assert Other.__module__ == "pkg.other"
try:
    pkg.nope
except AttributeError as error:
    assert str(error) == "module 'pkg' has no attribute 'nope'", error
else:
    raise AssertionError("no error")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("package", ["linrec.data", "linrec.eval",
                                     "linrec.models"])
def test_every_exported_name_of_the_lazy_packages_resolves(package):
    """In a fresh interpreter: each of `__all__` is there (a misspelt module or name fails)."""
    code = (f"import {package} as p\n"
            "missing = [n for n in p.__all__ if getattr(p, n, None) is None]\n"
            "assert not missing, missing\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr


def test_the_typed_configs_import_no_scipy():
    code = ("import sys\nfrom linrec.config import register_configs\nregister_configs()\n"
            "print(sorted(m for m in sys.modules if m.partition('.')[0] in "
            "{'scipy', 'matplotlib', 'torch', 'numba'}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"

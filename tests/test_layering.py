"""Imports only point down (ARCHITECTURE.md): the base modules import nothing of linrec above
them, data/ none of models/ and eval/, models/ and eval/ not each other, nothing below the
orchestration imports linrec.config, and no model module imports the registry that imports it.
Function-level (lazy) imports count too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "linrec"
BASE = {"linrec.errors", "linrec.params", "linrec.atomic", "linrec.hardware", "linrec.cache",
        "linrec.item_order"}
#: package prefix -> linrec packages/modules it may import
ALLOWED = {
    "linrec.data": ("linrec.data", *BASE),
    "linrec.eval": ("linrec.eval", "linrec.data", *BASE),
    "linrec.models": ("linrec.models", "linrec.data", *BASE),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {n for n in names if n == "linrec" or n.startswith("linrec.")}


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_imports_point_down(path):
    name = _module_name(path)
    imports = _imports(path)
    for prefix, allowed in ALLOWED.items():
        if name == prefix or name.startswith(prefix + "."):
            bad = sorted(i for i in imports
                         if not any(i == a or i.startswith(a + ".") for a in allowed))
            # `from linrec.data import sources` names a subpackage: allowed by its prefix
            assert not bad, f"{name} imports {bad}"
    if name in BASE:
        bad = sorted(i for i in imports if not any(i == b or i.startswith(b + ".") for b in BASE))
        assert not bad, f"{name} imports {bad}"
    if name.startswith("linrec.models.") and name != "linrec.models.registry":
        assert "linrec.models.registry" not in imports, f"{name} imports the model registry"


def test_nothing_below_the_orchestration_imports_the_run_config():
    below = [p for p in MODULES if _module_name(p).split(".")[1:2] in (["data"], ["eval"],
                                                                        ["models"])
             or _module_name(p) in BASE]
    for path in below:
        assert "linrec.config" not in _imports(path), _module_name(path)

"""Imports only point down (ARCHITECTURE.md), for every module of the package, and no modules
import each other in a cycle. Function-level (lazy) imports and type-checking imports count
too: each is a dependency a reader has to follow."""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "linrec"
BASE = ("linrec.errors", "linrec.params", "linrec.atomic", "linrec.hardware", "linrec.cache",
        "linrec.item_order", "linrec.registry", "linrec.scoring", "linrec.interrupts",
        "linrec.tracking", "linrec.plugins", "linrec.console", "linrec.trials",
        "linrec.lazy_exports", "linrec._row_kernels")
#: the layers, top to bottom: a module imports modules of its own layer or of lower ones (the
#: longest prefix names a module's layer)
LAYERS = (
    ("command line and reference", ("linrec.cli", "linrec.reference")),
    ("run", ("linrec.experiment", "linrec.external")),
    ("studies", ("linrec.studies",)),
    ("report", ("linrec.report", "linrec.recommend", "linrec.testing")),
    ("fitting and sweeps", ("linrec.fitting", "linrec.sweeps")),
    ("results and figures", ("linrec.results", "linrec.plots", "linrec.figure_process",
                             "linrec.figure_record")),
    ("configs", ("linrec.config", "linrec.study_configs", "linrec.hydra_compat")),
    ("data, evaluation, models", ("linrec.data", "linrec.eval", "linrec.models")),
    ("base", ("linrec", *BASE)),
)
#: within the data / evaluation / models layer: package prefix -> what it may import
ALLOWED = {
    "linrec.data": ("linrec.data", *BASE),
    "linrec.eval": ("linrec.eval", "linrec.data", *BASE),
    "linrec.models": ("linrec.models", "linrec.data", *BASE),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str) -> str:
    """The module an imported name lives in (`linrec.eval.evaluate` -> the module itself;
    `linrec.eval.EvalConfig` -> the package linrec.eval)."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


@cache
def _imports(module: str) -> frozenset[str]:
    """The linrec modules `module` imports, anywhere in its body."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            found.update(_resolve(a.name) for a in node.names if a.name.startswith("linrec"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("linrec"):
            found.update(_resolve(f"{node.module}.{a.name}") for a in node.names)
    found.discard(module)
    return frozenset(found)


def _layer(module: str) -> int:
    matches = [(len(prefix), index) for index, (_, prefixes) in enumerate(LAYERS)
               for prefix in prefixes if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} is in no layer of tests/test_layering.py"
    return max(matches)[1]


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
    layer = _layer(module)
    upward = sorted(i for i in _imports(module) if _layer(i) < layer)
    assert not upward, (f"{module} ({LAYERS[layer][0]}) imports "
                        + ", ".join(f"{i} ({LAYERS[_layer(i)][0]})" for i in upward))
    for prefix, allowed in ALLOWED.items():
        if _under(module, (prefix,)):
            bad = sorted(i for i in _imports(module) if not _under(i, allowed))
            assert not bad, f"{module} imports {bad}"
    if module.startswith("linrec.models.") and module != "linrec.models.registry":
        assert "linrec.models.registry" not in _imports(module), \
            f"{module} imports the model registry"


def _cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in _imports(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(MODULES)))
    try:
        for module in sorted(MODULES):
            if module not in index:
                visit(module)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_no_modules_import_each_other_in_a_cycle():
    assert _cycles() == []


def test_the_cycle_check_sees_a_cycle(monkeypatch):
    """The check itself: a made-up import of the command line by linrec.errors (which the
    command line reaches) closes a cycle it must report."""
    real = _imports.__wrapped__

    def with_cycle(module: str) -> frozenset[str]:
        return real(module) | frozenset({"linrec.cli"} if module == "linrec.errors" else ())

    monkeypatch.setattr(sys.modules[__name__], "_imports", with_cycle)
    assert any({"linrec.errors", "linrec.cli"} <= set(c) for c in _cycles())

"""A package's public names imported on first use (PEP 562 in spirit): importing one light
module of a package (its typed configs, which a command composes before anything else) then
imports no more of the package than that module needs: `linrec --help` does without scipy."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Mapping, Sequence
from typing import Any


class LazyPackage(types.ModuleType):
    """A package whose exported names (`_lazy_exports`: name -> the module defining it) are
    imported when first read. A name that is also its module's name (`linrec.eval.evaluate`,
    the function of the module `linrec.eval.evaluate`) stays the exported object when the
    import system sets the module as the package's attribute, as an eager `from m import name`
    in the package's body left it."""

    _lazy_exports: dict[str, str]

    def __getattr__(self, name: str) -> Any:
        module = self.__dict__.get("_lazy_exports", {}).get(name)
        if module is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(self, name, value)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        exports = self.__dict__.get("_lazy_exports", {})
        if isinstance(value, types.ModuleType) and exports.get(name) == value.__name__:
            value = getattr(value, name)
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted({*self.__dict__, *self.__dict__.get("_lazy_exports", {})})


def lazy_exports(package: str, modules: Mapping[str, Sequence[str]]) -> list[str]:
    """Make the package `package` (called from its __init__) export `modules` (module -> the
    names it defines) lazily; returns the exported names (its __all__)."""
    target = sys.modules[package]
    target.__dict__["_lazy_exports"] = {
        name: module for module, names in modules.items() for name in names}
    target.__class__ = LazyPackage
    return sorted(target._lazy_exports)

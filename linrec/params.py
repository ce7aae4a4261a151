"""Typed parameters: the one set of argument checks, and the base class of every typed config.

Every config (a model's parameters, a data source, a split protocol, the eval block, a study) is a
dataclass deriving from `Params`. Its fields say their type and allowed range
(`param(500.0, ge=0)`, `param("float32", choices=FLOAT_DTYPES)`); constructing one checks and
normalises every field and raises ConfigError naming `<where>.<field>`, the value and what is
allowed. `Params.from_mapping` builds one from a plain mapping (a YAML node, a dict) and rejects
unknown names with the list of allowed ones. The same dataclasses are registered in Hydra's
ConfigStore (`linrec.config`), so the YAML defaults and the Python defaults are one value.

The `check_*` functions are the same checks for plain function arguments.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np

from linrec.errors import ConfigError

FLOAT_DTYPES = ("float32", "float64")
P = TypeVar("P", bound="Params")


# ---------------------------------------------------------------------------------------------
# checks of single values


def _bounds_text(ge=None, gt=None, le=None, lt=None) -> str:
    """' >= 0 and < 1' (with a leading space), or '' without bounds."""
    parts = [f">= {ge:g}" if ge is not None else "", f"> {gt:g}" if gt is not None else "",
             f"<= {le:g}" if le is not None else "", f"< {lt:g}" if lt is not None else ""]
    text = " and ".join(p for p in parts if p)
    return f" {text}" if text else ""


def _in_bounds(x: float, ge=None, gt=None, le=None, lt=None) -> bool:
    return not ((ge is not None and x < ge) or (gt is not None and x <= gt)
                or (le is not None and x > le) or (lt is not None and x >= lt))


def _shown(value: Any) -> str:
    """repr of a value for a message, numpy scalars as the plain number (100, not
    np.int64(100))."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def _refuse(where: str, value: Any, problem: str, allowed: str, hint: str) -> ConfigError:
    """The one message format: `<where>=<value> <problem>; allowed: <allowed>[; <hint>]`, hint
    saying what to do about it."""
    message = f"{where}={_shown(value)} {problem}; allowed: {allowed}"
    return ConfigError(f"{message}; {hint}" if hint else message)


def check_int(value: Any, where: str, *, ge: int | None = None, gt: int | None = None,
              le: int | None = None, lt: int | None = None, hint: str = "") -> int:
    """int(value) if it is an integer (not a bool) within the bounds, else ConfigError
    `<where>=<value> is out of range; allowed: ...` (then `hint`, what to do)."""
    allowed = f"an integer{_bounds_text(ge, gt, le, lt)}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise _refuse(where, value, "is not an integer", allowed, hint)
    if not _in_bounds(value, ge, gt, le, lt):
        raise _refuse(where, value, "is out of range", allowed, hint)
    return int(value)


def check_real(value: Any, where: str, *, ge: float | None = None, gt: float | None = None,
               le: float | None = None, lt: float | None = None, finite: bool = True,
               hint: str = "") -> float:
    """float(value) if it is a number (not a bool; finite unless finite=False) within the
    bounds, else ConfigError (then `hint`, what to do)."""
    ok_type = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))
    number = float(value) if ok_type else math.nan
    bounds = _bounds_text(ge, gt, le, lt)
    if not ok_type or math.isnan(number) or (finite and math.isinf(number)):
        kind = "a finite number" if finite else "a number"
        raise _refuse(where, value, f"is not {kind}", f"{kind}{bounds}", hint)
    if not _in_bounds(number, ge, gt, le, lt):
        raise _refuse(where, value, "is out of range", f"a number{bounds}", hint)
    return number


def check_bool(value: Any, where: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise _refuse(where, value, "is not a flag", "true or false", "")
    return bool(value)


def check_choice(value: Any, where: str, choices: Sequence[Any], hint: str = "") -> Any:
    if value not in choices:
        raise _refuse(where, value, "is not allowed", str(list(choices)), hint)
    return value


def check_float_dtype(value: Any, where: str = "dtype") -> np.dtype:
    """np.dtype(float32) or np.dtype(float64) from a name or dtype; ConfigError otherwise."""
    try:
        dtype = np.dtype(value)
    except TypeError:
        dtype = None
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise _refuse(where, value, "is not allowed", str(list(FLOAT_DTYPES)), "")
    return dtype


def check_seed(value: Any, where: str = "seed") -> int:
    """A seed: an integer >= 0."""
    return check_int(value, where, ge=0)


# ---------------------------------------------------------------------------------------------
# typed configs


def param(default: Any = dataclasses.MISSING, *, ge: float | None = None,
          gt: float | None = None, le: float | None = None, lt: float | None = None,
          choices: Sequence[Any] | Callable[[], Sequence[Any]] | None = None,
          finite: bool = True, doc: str = "") -> Any:
    """A config field with its allowed range (numbers) or values (choices: a sequence, or a
    function that returns it when a value is checked, so that choices read from a registry
    include what plugins registered since). Lists and dicts are copied per instance; tuples are
    stored as they are."""
    metadata = {"ge": ge, "gt": gt, "le": le, "lt": lt, "choices": choices, "finite": finite,
                "doc": doc}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=functools.partial(_copy, default),
                                 metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _copy(value: Any) -> Any:
    return type(value)(value)


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _check_value(value: Any, annotation: Any, where: str, meta: Mapping[str, Any]) -> Any:
    """`value` checked against a field's annotation and constraints; normalised (lists of a
    tuple field become tuples, mappings of a nested config become that config)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _check_value(value, inner, where, meta)
    if annotation is Any:
        return value
    if isinstance(annotation, type) and issubclass(annotation, Params):
        if isinstance(value, annotation):
            return value
        if isinstance(value, Mapping):
            return annotation.from_mapping(value, where=where)
        raise ConfigError(f"{where}={value!r} must be a mapping of {sorted(annotation.names())}")
    bounds = {k: meta.get(k) for k in ("ge", "gt", "le", "lt")}
    if origin is tuple or origin is list:
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise ConfigError(f"{where}={value!r} is not a list; allowed: a list, e.g. [{value}]")
        element = args[0] if args else Any
        items = [_check_value(v, element, where, meta) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict or annotation is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}={value!r} is not a mapping; allowed: a mapping")
        return dict(value)
    if annotation is bool:
        value = check_bool(value, where)
    elif annotation is int:
        value = check_int(value, where, **bounds)
    elif annotation is float:
        value = check_real(value, where, finite=meta.get("finite", True), **bounds)
    elif annotation is str:
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str):
            raise ConfigError(f"{where}={value!r} is not a string; allowed: a string")
    choices = field_choices(meta)
    if choices is not None:
        check_choice(value, where, choices)
    return value


def field_choices(meta: Mapping[str, Any]) -> Sequence[Any] | None:
    """The allowed values of a field (its metadata's `choices`, called when it is a function),
    or None when any value of its type is allowed (also for a function's choices within
    `registry_choices_unchecked`)."""
    choices = meta.get("choices")
    if callable(choices):
        return None if _registry_choices_unchecked else choices()
    return choices


_registry_choices_unchecked = False


@contextlib.contextmanager
def registry_choices_unchecked() -> Iterator[None]:
    """Within: a field whose choices come from a function (a registry) accepts any value of its
    type. For building configs from their own defaults, which are built-in names, without
    importing what the registries import: registering the schemas (`linrec --help`) needs no
    estimator, nor scipy. A run's config is checked in full."""
    global _registry_choices_unchecked
    before, _registry_choices_unchecked = _registry_choices_unchecked, True
    try:
        yield
    finally:
        _registry_choices_unchecked = before


@dataclasses.dataclass
class Params:
    """Base of every typed config: fields checked and normalised on construction (see the module
    docstring). Subclasses add cross-field checks in `check()` and set `where`, the prefix of
    their messages ("eval.sampled", "data.split", ...)."""

    where: ClassVar[str] = "config"

    def __post_init__(self) -> None:
        hints = _type_hints(type(self))
        for f in dataclasses.fields(self):
            value = _check_value(getattr(self, f.name), hints[f.name],
                                 f"{self.label()}.{f.name}", f.metadata)
            object.__setattr__(self, f.name, value)
        self.check()

    def label(self) -> str:
        """The prefix of this config's messages (`where` unless a subclass knows better)."""
        return self.where

    def check(self) -> None:
        """Cross-field checks of a subclass (raise ConfigError)."""

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_mapping(cls: type[P], values: Any, where: str | None = None) -> P:
        """The config from a mapping of field names; an unknown name is a ConfigError listing
        the allowed ones."""
        where = where or cls.where
        if isinstance(values, cls):
            return values
        if not isinstance(values, Mapping):
            raise ConfigError(f"{where}={values!r} must be a mapping of {cls.names()}")
        unknown = sorted(set(map(str, values)) - set(cls.names()))
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {unknown}; allowed: {cls.names()}")
        obj = cls.__new__(cls)
        if where != cls.where:  # a nested config reports its full path
            object.__setattr__(obj, "where", where)
        for f in dataclasses.fields(cls):
            if f.name in values:
                value = values[f.name]
            elif f.default is not dataclasses.MISSING:
                value = f.default
            elif f.default_factory is not dataclasses.MISSING:
                value = f.default_factory()
            else:
                raise ConfigError(f"{where}.{f.name} is required")
            object.__setattr__(obj, f.name, value)
        obj.__post_init__()
        return obj

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every field's default as plain data, without the checks (a config whose defaults
        are not a valid config on their own, such as a study without datasets, has them too);
        a field without a default is left out."""
        out = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = _plain(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = _plain(f.default_factory())
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain data (nested configs as dicts, tuples as lists), e.g. for results.json."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


def chosen_config(value: Any, configs: Mapping[str, type[P]], where: str,
                  key: str = "name") -> P:
    """The config of `configs` that the mapping `value` names by its `key` field, built from the
    mapping (a config already of one of those types passes through). ConfigError with the
    allowed names when the key is missing or unknown."""
    if isinstance(value, tuple(configs.values())):
        return value
    if not isinstance(value, Mapping) or not value.get(key):
        raise ConfigError(f"{where} must be a mapping with a {key!r} in {sorted(configs)}, got "
                          f"{value!r}")
    if value[key] not in configs:
        raise ConfigError(f"{where}.{key}={value[key]!r} is unknown; allowed: {sorted(configs)}")
    return configs[value[key]].from_mapping(value, where=where)


def _plain(value: Any) -> Any:
    if isinstance(value, Params):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value

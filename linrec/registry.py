"""The one registry type: names -> entries for everything built by name (models, losses, data
sources, split protocols, studies, estimators).

A `Registry` is a mapping built with linrec's own entries; code outside linrec adds its own by
assignment (`MODEL_CONFIGS["mine"] = MyConfig`), usually from a plugin (`linrec.plugins`). A
name is never silently replaced: assigning a name that is taken by another origin (linrec itself,
another plugin, another script) raises ConfigError naming both; `del REGISTRY[name]` first says
the replacement is meant. `entry(name)` fails on an unknown name with the message every typed
config gives (`<field>=<name> is unknown; allowed: [...]`). An entry may name a
"module:attribute" to import only when it is used (`load`), so that a plain run does not import
the back-ends it does not need (torch, pandas).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any, TypeVar

from linrec.errors import ConfigError

T = TypeVar("T")

#: the origin of the entries a registry is built with
BUILT_IN = "linrec"
#: the origin of entries assigned outside a plugin's loading (a script, a notebook)
USER_CODE = "user code"
_origin = USER_CODE


@contextlib.contextmanager
def registering_as(origin: str) -> Iterator[None]:
    """Entries assigned inside the block are recorded as `origin`'s (a plugin's name)."""
    global _origin
    previous, _origin = _origin, origin
    try:
        yield
    finally:
        _origin = previous


class Registry(MutableMapping[str, T]):
    """Names -> entries of one kind; `field` is the config field that names them
    ("model.name"), used in messages; `kind` names an entry in messages ("model")."""

    def __init__(self, field: str, entries: Mapping[str, T] | Iterable[tuple[str, T]],
                 kind: str | None = None) -> None:
        self.field = field
        self.kind = kind or field.rsplit(".", 1)[0]
        self._entries: dict[str, T] = dict(entries)
        self._origins: dict[str, str] = dict.fromkeys(self._entries, BUILT_IN)

    @classmethod
    def of_configs(cls, field: str, configs: Iterable[type], key: str = "name",
                   kind: str | None = None) -> Registry:
        """Typed config classes by the default of their `key` field (its registry name)."""
        return cls(field, ((c.__dataclass_fields__[key].default, c) for c in configs), kind)

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __setitem__(self, name: str, entry: T) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{self.kind} names are non-empty strings, got {name!r}")
        if name in self._entries and self._entries[name] is not entry \
                and self._origins[name] != _origin:
            taken = self._origins[name]
            owner = "linrec's built-in" if taken == BUILT_IN else f"already registered by {taken}"
            raise ConfigError(
                f"{_origin} registers {self.kind} {name!r}, which is {owner} "
                f"({_describe(self._entries[name])}); choose another name (nothing is replaced "
                f"silently; `del` the entry first to replace it on purpose)")
        self._entries[name] = entry
        self._origins[name] = _origin

    def __delitem__(self, name: str) -> None:
        del self._entries[name]
        del self._origins[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.field!r}, {list(self._entries)})"

    def origin(self, name: str) -> str:
        """Who registered `name`: "linrec", a plugin ("plugin 'mypkg'") or "user code"."""
        return self._origins[name]

    def entry(self, name: Any) -> T:
        """The entry of `name`; ConfigError naming the field and the known names otherwise."""
        if not isinstance(name, str) or name not in self._entries:
            raise ConfigError(f"{self.field}={name!r} is unknown; allowed: {sorted(self)}")
        return self._entries[name]


def _describe(entry: Any) -> str:
    """'module:Qualname' of a class or function, else its repr (for messages)."""
    module, name = getattr(entry, "__module__", None), getattr(entry, "__qualname__", None)
    return f"{module}:{name}" if module and name else repr(entry)


def load(path: str) -> Any:
    """The attribute a "module:attribute" path names, imported now."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)

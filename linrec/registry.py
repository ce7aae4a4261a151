"""The one registry type: names -> entries for everything built by name (models, losses, data
sources, studies, estimators).

A `Registry` is a mapping built with linrec's own entries; code outside linrec adds its own by
assignment (`MODEL_CONFIGS["mine"] = MyConfig`). `entry(name)` fails on an unknown name with the
message every typed config gives (`<field>=<name> is unknown; allowed: [...]`). An entry may
name a "module:attribute" to import only when it is used (`load`), so that a plain run does
not import the back-ends it does not need (torch, pandas).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any, TypeVar

from linrec.errors import ConfigError

T = TypeVar("T")


class Registry(MutableMapping[str, T]):
    """Names -> entries of one kind; `field` is the config field that names them
    ("model.name"), used in messages."""

    def __init__(self, field: str, entries: Mapping[str, T] | Iterable[tuple[str, T]]) -> None:
        self.field = field
        self._entries: dict[str, T] = dict(entries)

    @classmethod
    def of_configs(cls, field: str, configs: Iterable[type], key: str = "name") -> Registry:
        """Typed config classes by the default of their `key` field (its registry name)."""
        return cls(field, ((c.__dataclass_fields__[key].default, c) for c in configs))

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __setitem__(self, name: str, entry: T) -> None:
        self._entries[name] = entry

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.field!r}, {list(self._entries)})"

    def entry(self, name: Any) -> T:
        """The entry of `name`; ConfigError naming the field and the known names otherwise."""
        if not isinstance(name, str) or name not in self._entries:
            raise ConfigError(f"{self.field}={name!r} is unknown; allowed: {sorted(self)}")
        return self._entries[name]


def load(path: str) -> Any:
    """The attribute a "module:attribute" path names, imported now."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)

"""Plugins: code outside linrec that registers models, MF losses, estimators, data sources and
split protocols through linrec's registries, loaded before a command composes its config, so
that what it registers is selectable exactly as a built-in (`linrec model=<name>`).

Where plugins come from, in this order:

1. the entry points of the group `linrec.plugins` of every installed distribution: the value
   names a module (imported) or `module:function` (imported, then the function is called with no
   arguments);
2. `$LINREC_PLUGINS`: a comma-separated list of module names or paths of `.py` files;
3. the run's `plugins=[...]` setting (the same forms).

A module name that the installed packages do not provide is looked up in the working directory.
A file path's directory is put first on `sys.path` and the module imported by its file's stem.
Either directory is also added to `$PYTHONPATH`, so that the processes a command starts (joblib
workers, SLURM jobs), which load the same plugins (the config carries `plugins`, the environment
`$LINREC_PLUGINS`), import them under the same module names.

A plugin that fails to import, or registers a name that linrec or another plugin already has,
raises `PluginError`, one line naming the plugin and the error. Loading is idempotent: a plugin
already loaded in this process is not loaded again.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from linrec.errors import ConfigError
from linrec.registry import registering_as

#: the entry-point group linrec reads plugins from
ENTRY_POINT_GROUP = "linrec.plugins"
#: the environment variable of plugins given by module name or file path
PLUGINS_ENV = "LINREC_PLUGINS"


class PluginError(ConfigError):
    """A plugin could not be loaded: the message names the plugin and the cause."""


@dataclass(frozen=True)
class LoadedPlugin:
    """One loaded plugin: `label` as messages name it, `spec` what named it (an entry point's
    value, a module name or a file path), `distribution` and `version` of an entry point's
    package (None otherwise)."""

    label: str
    spec: str
    distribution: str | None = None
    version: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {"plugin": self.label, "spec": self.spec, "distribution": self.distribution,
                "version": self.version}


_loaded: dict[str, LoadedPlugin] = {}


def loaded_plugins() -> list[LoadedPlugin]:
    """Every plugin this process has loaded, in load order (results.json records them)."""
    return list(_loaded.values())


def env_plugins() -> list[str]:
    """The plugins $LINREC_PLUGINS names (comma-separated; blanks ignored)."""
    return [p.strip() for p in os.environ.get(PLUGINS_ENV, "").split(",") if p.strip()]


def load_plugins(specs: Iterable[str] = (), *, entry_points: bool = True) -> list[LoadedPlugin]:
    """Load the entry-point plugins (unless `entry_points=False`), those of $LINREC_PLUGINS and
    `specs` (module names or .py paths); the plugins loaded by this call are returned. Raises
    PluginError (one line) on the first that fails."""
    new = []
    if entry_points:
        for entry in _entry_points():
            key = f"entry point {entry.value}"
            if key not in _loaded:
                dist = getattr(entry, "dist", None)
                plugin = LoadedPlugin(f"plugin {entry.name!r}", entry.value,
                                      getattr(dist, "name", None), getattr(dist, "version", None))
                _load_entry_point(entry, plugin.label)
                _loaded[key] = plugin
                new.append(plugin)
    for spec in [*env_plugins(), *specs]:
        if not isinstance(spec, str) or not spec.strip():
            raise PluginError(f"plugins: {spec!r} is not a module name or a file path")
        spec = spec.strip()
        if spec not in _loaded:
            plugin = LoadedPlugin(f"plugin {spec!r}", spec)
            _import_spec(spec, plugin.label)
            _loaded[spec] = plugin
            new.append(plugin)
    return new


def _entry_points() -> Sequence:
    from importlib.metadata import entry_points

    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)


def _load_entry_point(entry, label: str) -> None:
    with registering_as(label):
        try:
            target = entry.load()
            if ":" in entry.value:  # module:function registers when called
                target()
        except ConfigError as exc:
            raise _named(exc, label) from exc
        except Exception as exc:  # noqa: BLE001 - any failure of foreign code is one line
            raise PluginError(f"{label} ({entry.value}) failed to load: "
                              f"{type(exc).__name__}: {exc}") from exc


def _import_spec(spec: str, label: str) -> None:
    """Import a plugin given by module name (`pkg.mod`, `pkg.mod:function`) or file path."""
    module, _, function = spec.partition(":") if not _is_path(spec) else (spec, "", "")
    with registering_as(label):
        try:
            if _is_path(module):
                path = Path(module).expanduser().resolve()
                if not path.is_file():
                    raise PluginError(f"{label}: no such file: {path}")
                _add_import_dir(path.parent)
                imported = _import_module(path.stem, path)
            else:
                if importlib.util.find_spec(module.partition(".")[0]) is None:
                    _add_import_dir(Path.cwd())  # a researcher's module beside the command
                imported = _import_module(module)
            if function:
                getattr(imported, function)()
        except PluginError:
            raise
        except ConfigError as exc:
            raise _named(exc, label) from exc
        except Exception as exc:  # noqa: BLE001 - any failure of foreign code is one line
            raise PluginError(f"{label} failed to load: {type(exc).__name__}: {exc}") from exc


def _named(exc: ConfigError, label: str) -> PluginError:
    """The PluginError of a plugin's ConfigError, its message starting with the plugin."""
    text = " ".join(str(exc).split())
    return PluginError(text if text.startswith(label) else f"{label}: {text}")


def _is_path(spec: str) -> bool:
    return spec.endswith(".py") or os.sep in spec or (os.altsep or os.sep) in spec


def _import_module(name: str, path: Path | None = None):
    """The module `name`, imported (or the one already imported); with `path`, the module of
    that file, which must then be the one imported under `name`."""
    module = sys.modules.get(name)
    if module is None:
        importlib.invalidate_caches()
        return importlib.import_module(name)
    if path is not None and Path(getattr(module, "__file__", "") or "").resolve() != path:
        raise PluginError(f"plugin {str(path)!r}: a different module named {name!r} is already "
                          f"imported ({module.__file__}); rename the file")
    return module


def _add_import_dir(directory: Path) -> None:
    """`directory` first on sys.path and on $PYTHONPATH (for the processes started later)."""
    text = str(directory)
    if text not in sys.path:
        sys.path.insert(0, text)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if text not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([text, *paths])


def plugins_in_overrides(overrides: Sequence[str]) -> list[str]:
    """The plugins a command line's `plugins=...` override names (every value of a sweep over
    it), so that they are loaded before the config is composed. Hydra's own parser reads the
    value; an override it cannot parse is left to Hydra's message."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    wanted = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] == "plugins" and "=" in o]
    if not wanted:
        return []
    try:
        parsed = OverridesParser.create().parse_overrides(wanted)
    except Exception:  # noqa: BLE001 - Hydra reports a syntax error itself
        return []
    found: list[str] = []
    for override in parsed:
        values = list(override.sweep_string_iterator()) if override.is_sweep_override() \
            else [override.value()]
        for value in values:
            if isinstance(value, str) and value.startswith("["):
                value = OverridesParser.create().parse_override(f"x={value}").value()
            found += [str(v) for v in value] if isinstance(value, list) else \
                ([] if value is None else [str(value)])
    return found

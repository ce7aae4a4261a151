"""What differs between the Hydra / OmegaConf releases linrec runs on, in one place.

pyproject.toml bounds linrec to Hydra 1.3 and OmegaConf 2.3, the releases it is tested on;
these helpers already do what Hydra 1.4 / OmegaConf 2.4 expect, so that moving up is a change of
bounds: `version_base` is required by 1.3 (which warns without it) and deprecated by 1.4 (which
warns with it); `register_new_resolver` is 2.3's name for what 2.4 calls `register_resolver`
(2.3's `register_resolver` is its deprecated legacy API).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from importlib.metadata import version
from typing import Any


def _major_minor(distribution: str) -> tuple[int, int]:
    major, minor = version(distribution).split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


@functools.cache
def version_base() -> dict[str, str]:
    """Keyword arguments that fix Hydra's behaviour at 1.3 for `hydra.main` and
    `initialize_config_dir`: {"version_base": "1.3"} under Hydra 1.3, {} from 1.4 on."""
    return {"version_base": "1.3"} if _major_minor("hydra-core") < (1, 4) else {}


def register_resolver(name: str, resolver: Callable[..., Any]) -> None:
    """Register (or replace) an OmegaConf resolver `${name:...}` under OmegaConf 2.3 and 2.4."""
    from omegaconf import OmegaConf

    if _major_minor("omegaconf") < (2, 4):
        OmegaConf.register_new_resolver(name, resolver, replace=True)
    else:
        OmegaConf.register_resolver(name, resolver, replace=True)


@contextlib.contextmanager
def mode_composed(mode: Any) -> Iterator[None]:
    """Inside: Hydra's `get_mode` answers `mode` without composing.

    Hydra 1.3 composes the whole config once only to read `hydra.mode` (`Hydra.get_mode`), then
    again to run it. The `linrec` command has composed the same config before (its precheck) and
    read the mode there, so this third composition of every command (~0.3 s) is skipped. A
    Hydra without `get_mode` is left as it is."""
    from hydra._internal.hydra import Hydra

    original = getattr(Hydra, "get_mode", None)
    if original is None:
        yield
        return
    Hydra.get_mode = lambda self, config_name, overrides: mode
    try:
        yield
    finally:
        Hydra.get_mode = original

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


#: the override Hydra's `_run_app` adds to run a config whose `hydra.mode` is unset
RUN_MODE = "hydra.mode=RUN"


@contextlib.contextmanager
def precomposed(cfg: Any, overrides: list[str]) -> Iterator[None]:
    """Inside: Hydra takes `cfg`, composed before from its config (`hydra.job.config_name`) and
    `overrides` with its `hydra` node (in run mode, as the compose API does), instead of
    composing it again.

    Hydra 1.3 composes the whole config once only to read `hydra.mode` (`Hydra.get_mode`), and
    again to run it. The `linrec` command has composed the same config before (its precheck):
    `get_mode` answers `cfg.hydra.mode`, and the run's own composition of the same config and
    overrides returns `cfg` (once; any other composition, a sweep's jobs among them, is Hydra's
    own). Each composition skipped saves ~0.08 s of a command (experiments/benchmarks/
    bench_command.py)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.hydra import Hydra
    from hydra.types import RunMode

    original_mode = getattr(Hydra, "get_mode", None)
    original_load = ConfigLoaderImpl.load_configuration
    pending, composed_from = [cfg], (cfg.hydra.job.config_name, list(overrides))

    def load_configuration(self, config_name, overrides, run_mode, *args, **kwargs):
        if pending and run_mode == RunMode.RUN and config_name == composed_from[0]:
            if list(overrides) == composed_from[1]:
                return pending.pop()
            if list(overrides) == [*composed_from[1], RUN_MODE] and cfg.hydra.mode is None:
                # Hydra adds this override to run a config that sets no mode: its effect
                cfg.hydra.mode = RunMode.RUN
                cfg.hydra.overrides.hydra.append(RUN_MODE)
                return pending.pop()
        return original_load(self, config_name, overrides, run_mode, *args, **kwargs)

    if original_mode is not None:
        Hydra.get_mode = lambda self, config_name, overrides: cfg.hydra.mode
    ConfigLoaderImpl.load_configuration = load_configuration
    try:
        yield
    finally:
        if original_mode is not None:
            Hydra.get_mode = original_mode
        ConfigLoaderImpl.load_configuration = original_load


@contextlib.contextmanager
def one_repository_per_listing() -> Iterator[None]:
    """Inside: Hydra lists a config group's options from one copy of the config repository per
    (config, overrides) pair, instead of a fresh copy per group.

    Hydra 1.3's `--help` and `--hydra-help` list every group's options, one
    `get_group_options` call per group (about 130 for linrec), and each call deep-copies the
    whole repository (the ConfigStore with linrec's structured configs) before reading it:
    about 3 s of `linrec --help` on a 2-core VM (experiments/benchmarks/bench_first_run.py).
    Listing reads the copy and never changes it, so one copy answers every call the same."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.object_type import ObjectType

    original = ConfigLoaderImpl.get_group_options
    copies: dict[tuple[int, str | None, tuple[str, ...]], Any] = {}

    def get_group_options(self, group_name, results_filter=ObjectType.CONFIG, config_name=None,
                          overrides=None):
        key = (id(self), config_name, tuple(overrides or ()))
        if key not in copies:
            copies[key] = self._parse_overrides_and_create_caching_repo(
                config_name, list(overrides or ()))[1]
        return copies[key].get_group_options(group_name, results_filter)

    ConfigLoaderImpl.get_group_options = get_group_options
    try:
        yield
    finally:
        ConfigLoaderImpl.get_group_options = original

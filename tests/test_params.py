"""linrec.params: the one set of argument checks and the typed-config base."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from linrec.errors import ConfigError
from linrec.params import (
    Params,
    check_bool,
    check_choice,
    check_float_dtype,
    check_int,
    check_real,
    check_seed,
    chosen_config,
    param,
    registry_choices_unchecked,
)


def test_scalar_checks():
    assert check_int(np.int64(3), "x", ge=1) == 3 and isinstance(check_int(3, "x"), int)
    assert check_real(2, "x", gt=0) == 2.0 and check_real(-math.inf, "x", finite=False) == -math.inf
    assert check_bool(np.bool_(True), "x") is True
    assert check_choice("a", "x", ("a", "b")) == "a"
    assert check_float_dtype("float32") == np.dtype(np.float32)
    assert check_seed(0) == 0
    for call, match in [
        (lambda: check_int(True, "n"), "n=True is not an integer"),
        (lambda: check_int(0, "n", ge=1), "n=0 is out of range; allowed: an integer >= 1"),
        (lambda: check_real(math.nan, "r"), "r=nan is not a finite number"),
        (lambda: check_real(1.0, "r", ge=0, lt=1), "allowed: a number >= 0 and < 1"),
        (lambda: check_bool("yes", "f"), "f='yes' is not a flag; allowed: true or false"),
        (lambda: check_choice("c", "x", ("a", "b")), r"x='c' is not allowed; allowed: \['a'"),
        (lambda: check_float_dtype("int32"), "dtype='int32' is not allowed"),
        (lambda: check_seed(-1), "seed=-1 is out of range"),
    ]:
        with pytest.raises(ConfigError, match=match):
            call()


def test_messages_show_numpy_scalars_as_numbers_and_end_with_what_to_do():
    with pytest.raises(ConfigError) as info:
        check_int(np.int64(100), "eval.sampled.sample_sizes", ge=2, le=99,
                  hint="lower eval.sampled.sample_sizes")
    assert str(info.value) == ("eval.sampled.sample_sizes=100 is out of range; allowed: an "
                               "integer >= 2 and <= 99; lower eval.sampled.sample_sizes")
    with pytest.raises(ConfigError) as info:
        check_real(np.float32(2.5), "x", le=1, hint="use a fraction")
    assert str(info.value) == "x=2.5 is out of range; allowed: a number <= 1; use a fraction"
    with pytest.raises(ConfigError, match=r"^pool='p' is not allowed; allowed: \['a'\]; pick a$"):
        check_choice("p", "pool", ["a"], hint="pick a")


@dataclass
class _Inner(Params):
    where = "outer.inner"
    k: int = param(1, ge=1)


@dataclass
class _Outer(Params):
    where = "outer"
    ks: tuple[int, ...] = param((1, 2), ge=1)
    names: list[str] = param(["a"], choices=("a", "b"))
    rank: int | None = param(None, ge=1)
    path: str | None = None
    options: dict = param({"x": 1})
    inner: _Inner = field(default_factory=_Inner)


def test_params_normalise_and_check_every_field():
    outer = _Outer.from_mapping({"ks": [3, 4], "inner": {"k": 2}, "path": Path("/tmp/x")})
    assert outer.ks == (3, 4) and outer.inner == _Inner(k=2) and outer.path == "/tmp/x"
    assert outer.to_dict() == {"ks": [3, 4], "names": ["a"], "rank": None, "path": "/tmp/x",
                               "options": {"x": 1}, "inner": {"k": 2}}
    assert _Outer().options is not _Outer().options  # mutable defaults are copied
    for values, match in [
        ({"ks": [0]}, "outer.ks=0 is out of range"),
        ({"names": ["c"]}, "outer.names='c' is not allowed"),
        ({"rank": 0}, "outer.rank=0 is out of range"),
        ({"inner": {"k": 0}}, "outer.inner.k=0 is out of range"),
        ({"inner": {"kk": 0}}, r"outer.inner: unknown field\(s\) \['kk'\]; allowed: \['k'\]"),
        ({"rnk": 1}, r"outer: unknown field\(s\) \['rnk'\]"),
        ("x", "outer='x' must be a mapping"),
    ]:
        with pytest.raises(ConfigError, match=match):
            _Outer.from_mapping(values)


@dataclass
class _Apple(Params):
    where = "fruit"
    name: str = "apple"
    size: int = param(1, ge=1)


@dataclass
class _Pear(Params):
    where = "fruit"
    name: str = "pear"


def test_chosen_config_builds_the_named_config():
    configs = {"apple": _Apple, "pear": _Pear}
    assert chosen_config({"name": "apple", "size": 3}, configs, "fruit") == _Apple(size=3)
    pear = _Pear()
    assert chosen_config(pear, configs, "fruit") is pear
    with pytest.raises(ConfigError, match=r"fruit.name='fig' is unknown; allowed: \['apple', "
                                          r"'pear'\]"):
        chosen_config({"name": "fig"}, configs, "fruit")
    with pytest.raises(ConfigError, match=r"fruit must be a mapping with a 'name'"):
        chosen_config({"size": 2}, configs, "fruit")
    with pytest.raises(ConfigError, match=r"basket.size=0 is out of range"):
        chosen_config({"name": "apple", "size": 0}, configs, "basket")


def test_registry_choices_are_unchecked_only_within_the_block():
    """Inside `registry_choices_unchecked` a field whose choices come from a function takes
    any value of its type without calling the function; fixed choices are still checked; after
    the block (also after an error in it) the function decides again."""
    calls = []

    def registered() -> tuple[str, ...]:
        calls.append(1)
        return ("a", "b")

    @dataclass
    class Chosen(Params):
        where = "chosen"
        name: str = param("a", choices=registered)
        fixed: str = param("x", choices=("x", "y"))

    with registry_choices_unchecked():
        assert Chosen(name="plugin-only").name == "plugin-only" and not calls
        with pytest.raises(ConfigError, match="chosen.fixed"):
            Chosen(fixed="z")
    with pytest.raises(ConfigError, match="chosen.name='plugin-only' is not allowed"):
        Chosen(name="plugin-only")
    assert calls
    with pytest.raises(RuntimeError), registry_choices_unchecked():
        raise RuntimeError
    with pytest.raises(ConfigError):
        Chosen(name="c")

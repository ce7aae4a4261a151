"""Small text helpers of the report's tables and file names."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def short_param(param: str) -> str:
    """`param.lam` -> `lam` (a column of the tidy table -> its name in a printed table)."""
    return param.removeprefix("param.")


def slug(text: str) -> str:
    """`text` made safe for a file name (`n=20` -> `n_20`); `data` when nothing is left."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "data"


def format_number(value: Any, digits: int = 4, setting: bool = False) -> str:
    """A cell as every table prints it: None and NaN empty; a metric's float in `digits`
    decimals (`digits` significant digits from 1e4 on, where decimals would only pad); a
    setting's float (`setting`: λ, a learning rate) in 6 significant digits; anything else as
    it is."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        if setting:
            return f"{value:.6g}"
        return f"{value:.{digits}f}" if abs(value) < 1e4 else f"{value:.{digits}g}"
    return str(value)


def fmt_value(value: Any) -> str:
    """A setting as printed in a table (`format_number(value, setting=True)`)."""
    return format_number(value, setting=True)


def relative_run(run: str, dirs: Sequence[Path]) -> str:
    """A run directory relative to the searched directory that holds it."""
    for d in dirs:
        try:
            return str(Path(run).relative_to(d)) or "."
        except ValueError:
            continue
    return run

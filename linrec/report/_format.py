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


def fmt_value(value: Any) -> str:
    """A setting as printed in a table: floats in 6 significant digits, NaN and None empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def relative_run(run: str, dirs: Sequence[Path]) -> str:
    """A run directory relative to the searched directory that holds it."""
    for d in dirs:
        try:
            return str(Path(run).relative_to(d)) or "."
        except ValueError:
            continue
    return run

"""Sphinx configuration of linrec's documentation (Markdown pages read by MyST).

Build: `sphinx-build -W -b html docs docs/_build/html` (the `docs` extra installs Sphinx and
MyST; the tests build it with warnings as errors). The configuration reference and the
results.json schema are generated from the code before each build, into docs/_generated/.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the checkout's linrec, also without an install

import linrec  # noqa: E402
from linrec.reference import (  # noqa: E402
    api_reference_markdown,
    command_help_markdown,
    config_reference_markdown,
)
from linrec.results_schema import schema_markdown  # noqa: E402

project = "linrec"
author = "the linrec authors"
copyright = "2026, the linrec authors"
release = version = linrec.__version__

# sphinx-mathjax-offline puts a copy of MathJax into the site (_static/mathjax): the formulas
# render without a network, where Sphinx's default loads MathJax from a CDN
extensions = ["myst_parser", "sphinx-mathjax-offline"]
myst_enable_extensions = ["dollarmath", "amsmath", "deflist"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_generated"]
html_theme = "alabaster"
html_theme_options = {"description": "linear recommenders and the evaluation of recommenders",
                      "fixed_sidebar": True}
html_title = f"linrec {release}"
suppress_warnings: list[str] = []


def _write_generated() -> None:
    out = HERE / "_generated"
    out.mkdir(exist_ok=True)
    pages = {"config.md": config_reference_markdown(), "results.md": schema_markdown(),
             "api.md": api_reference_markdown(), "commands.md": command_help_markdown()}
    for name, text in pages.items():
        path = out / name
        if not path.exists() or path.read_text() != text:  # unchanged files keep Sphinx's cache
            path.write_text(text)


_write_generated()

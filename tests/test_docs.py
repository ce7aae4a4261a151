"""The documentation site builds with no warning, its generated reference covers the code, and
nothing in the project points outside the repository."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from linrec.reference import config_reference_markdown, undocumented_fields

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_without_warnings_and_renders_its_math_offline(tmp_path):
    """Every page builds with warnings as errors; the formulas are rendered by the copy of
    MathJax inside the site, so no page loads a script from the network."""
    out = tmp_path / "html"
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                           "html", "-d", str(tmp_path / "doctrees"), str(ROOT / "docs"),
                           str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for page in ("index", "getting-started", "guide", "howto/python-api", "concepts/sampled",
                 "reference/config", "reference/results", "reference/api", "reproductions"):
        assert (out / f"{page}.html").is_file(), page
    config = (out / "reference" / "config.html").read_text()
    assert "model.lam" in config and "data.split.order" in config
    assert (out / "_static" / "mathjax" / "tex-chtml.js").is_file()
    for page in out.rglob("*.html"):
        scripts = re.findall(r'<script[^>]*src="([^"]+)"', page.read_text())
        assert not [s for s in scripts if "//" in s], f"{page}: a script from the network"
    sampled = (out / "concepts" / "sampled.html").read_text()
    assert '_static/mathjax/tex-chtml.js"' in sampled and r"\(" in sampled


def test_every_config_field_has_a_description():
    assert undocumented_fields() == []


def test_the_config_reference_lists_every_group_option():
    from linrec.models.configs import MODEL_CONFIGS
    from linrec.models.losses import LOSS_CONFIGS

    text = config_reference_markdown()
    for name in MODEL_CONFIGS:
        assert f"### `model={name}`" in text
    for name in LOSS_CONFIGS:
        assert f"### `loss={name}`" in text
    for path in sorted((ROOT / "conf" / "experiment").glob("*.yaml")):
        assert f"`experiment={path.stem}`" in text
    # a field shows its type, default, range and meaning
    assert re.search(r"\| `model\.lam` \| number \| `500\.0` \| >= 0 \| λ", text)


#: what would point outside the repository: the development specs and papers
_OUTSIDE = re.compile(r"\.\./shared|/work/shared|shared/(spec|seeds)/|\bspec(/\w+\.md)?\s*§|"
                      r"spec/\w+\.md|\bseeds/")


def test_nothing_in_the_project_points_outside_it():
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True,
                             text=True, check=True).stdout.split()
    offenders = []
    for name in tracked:
        path = ROOT / name
        if path.suffix not in {".py", ".md", ".yaml", ".toml", ".txt", ".cff", ""} or \
                not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if _OUTSIDE.search(line) and name != "tests/test_docs.py":
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders[:50]) + f"\n({len(offenders)} lines)"

"""Print the two commands of README.md's quick start, one per line: the first two fenced bash
blocks of its "## Quick start" section (set up and run the main job; run the tests). `.ci/run`
runs exactly these, so CI installs and tests as a new user does."""

from __future__ import annotations

import re
import sys
from pathlib import Path


def quick_start_commands(readme: str) -> list[str]:
    """The first two bash blocks of the '## Quick start' section, each joined into one line."""
    section = re.search(r"^## Quick start.*?$(.*?)(?=^## )", readme, re.S | re.M)
    if section is None:
        raise SystemExit("README.md has no '## Quick start' section")
    blocks = re.findall(r"^```bash\n(.*?)^```", section.group(1), re.S | re.M)
    if len(blocks) < 2:
        raise SystemExit("README.md's quick start has fewer than two bash blocks")
    return [" ".join(line.strip() for line in block.strip().splitlines()) for block in blocks[:2]]


if __name__ == "__main__":
    readme = Path(sys.argv[1] if len(sys.argv) > 1 else "README.md").read_text()
    print("\n".join(quick_start_commands(readme)))

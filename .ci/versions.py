"""The installed versions of linrec's environment, against released versions and the lock.

    python .ci/versions.py check   # exit 1, naming them, if any installed version is a
                                   # pre-release (but of a package that has no release:
                                   # ONLY_PRERELEASES); list where the install differs from the lock
    python .ci/versions.py lock    # write .ci/lock.txt: every installed version, pinned

Run it with the interpreter of the environment to inspect (`.venv/bin/python`). The lock is
what CI installed; `pip install -c .ci/lock.txt -e '.[test]'` installs exactly it (README).
"""

from __future__ import annotations

import sys
from importlib.metadata import distributions
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

LOCK = Path(__file__).with_name("lock.txt")
#: the installer and the project itself are not part of the lock
NOT_LOCKED = {"pip", "linrec"}
#: packages that publish beta versions only, each required at one exact version by a released
#: package (opentelemetry-sdk pins its semantic conventions, and MLflow's client needs the SDK)
ONLY_PRERELEASES = {"opentelemetry-semantic-conventions"}
HEADER = """\
# Every package version CI installed with README.md's quick start (Python 3.11, Linux x86_64).
# Install exactly these: pip install torch==2.13.0 && pip install -c .ci/lock.txt -e '.[test]'
# Regenerate in a venv made by the quick start: .venv/bin/python .ci/versions.py lock
# Local version labels are left out (torch==2.13.0 admits the CPU build 2.13.0+cpu as well).
"""


def installed() -> dict[str, Version]:
    """Canonical distribution name -> installed version (local labels dropped)."""
    found = {}
    for dist in distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name not in NOT_LOCKED:
            found[name] = Version(Version(dist.version).public)
    return dict(sorted(found.items()))


def locked() -> dict[str, Version]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def check() -> int:
    versions = installed()
    pre = [f"{name} {v}" for name, v in versions.items()
           if v.is_prerelease and name not in ONLY_PRERELEASES]
    if pre:
        print(f"ci: pre-release versions installed: {', '.join(pre)}", file=sys.stderr)
        return 1
    print(f"ci: no pre-release among the {len(versions)} installed packages")
    if LOCK.exists():
        pins = locked()
        moved = [f"{n} {pins.get(n, '-')} -> {versions.get(n, '-')}"
                 for n in sorted(set(pins) | set(versions)) if pins.get(n) != versions.get(n)]
        print("ci: installed versions equal .ci/lock.txt" if not moved else
              "ci: installed versions differ from .ci/lock.txt (lock -> installed): "
              + "; ".join(moved))
    return 0


def lock() -> int:
    lines = [f"{name}=={version}" for name, version in installed().items()]
    LOCK.write_text(HEADER + "\n".join(lines) + "\n")
    print(f"ci: wrote {len(lines)} pins to {LOCK}")
    return 0


if __name__ == "__main__":
    commands = {"check": check, "lock": lock}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        raise SystemExit(f"usage: python {sys.argv[0]} {{check|lock}}")
    sys.exit(commands[sys.argv[1]]())

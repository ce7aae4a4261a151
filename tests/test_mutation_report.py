"""The mutation report of the numerical core (experiments/mutation_report.py): the committed
report was computed from today's core, and the script sorts survivors as it says."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import mutation_report as report  # noqa: E402


def test_the_committed_report_was_computed_from_the_core_as_it_is():
    """A change to a mutated module (pyproject's only_mutate) comes with a fresh report
    (`OMP_NUM_THREADS=1 mutmut run && python experiments/mutation_report.py`)."""
    text = (ROOT / "experiments" / "mutation" / "REPORT.md").read_text()
    recorded = re.search(r"core sources ([0-9a-f]{16})", text).group(1)
    assert recorded == report.core_hash(), (
        "the core changed since experiments/mutation/REPORT.md: rerun "
        "`OMP_NUM_THREADS=1 mutmut run && python experiments/mutation_report.py`")


def test_every_reason_names_a_change():
    for name, entry in report.read_reasons().items():
        assert entry["change"].strip() and entry["why"].strip(), name
        assert any(line.startswith("+") for line in entry["change"].splitlines()), name


SOURCE = '''\
import numpy as np


def clipped(x, low):
    if low < 0:
        raise ValueError(
            f"low={low} must be >= 0"
        )
    return np.clip(x, low, None)


class Scale:
    @staticmethod
    def apply(x):
        if x is None:
            raise TypeError("no x")
        return 2 * x
'''


def _diff(old: int, removed: str, added: str) -> str:
    """A one-line change at function line old + 1, after a context line at `old`."""
    return f"--- f\n+++ f\n@@ -{old},3 +{old},3 @@\n context\n-{removed}\n+{added}\n context\n"


@pytest.mark.parametrize("name, diff, expected", [
    # the message of the raise (line 4 of the function is the f-string)
    ("m.x_clipped__mutmut_1", _diff(3, 'f"low={low} must be >= 0"', 'f"low={low} XX"'), True),
    # the condition that raises is not the message
    ("m.x_clipped__mutmut_2", _diff(1, "if low < 0:", "if low <= 0:"), False),
    ("m.x_clipped__mutmut_3", _diff(5, "return np.clip(x, low, None)", "return None"), False),
    # a method (mutmut's xǁClassǁmethod name), decorated: lines count from the decorator
    ("m.xǁScaleǁapply__mutmut_1", _diff(2, "if x is None:", "if x is not None:"), False),
    ("m.xǁScaleǁapply__mutmut_2", _diff(3, 'raise TypeError("no x")', 'raise TypeError("XX")'),
     True),
])
def test_a_mutant_only_in_a_raise_statement_is_message_only(name, diff, expected):
    assert report.only_in_raise(SOURCE, name, diff) is expected


def test_changed_lines_count_from_the_hunk():
    diff = "--- f\n+++ f\n@@ -7,4 +7,4 @@\n a\n-b\n+B\n c\n-d\n+D\n"
    assert report.changed_old_lines(diff) == [8, 10]


def test_survivors_are_sorted_into_equivalent_message_and_unexplained():
    M = report.Mutant
    mutants = [M("a__mutmut_1", "a.py", "killed", ""),
               M("a__mutmut_2", "a.py", "survived", "- x\n+ y"),
               M("a__mutmut_3", "a.py", "survived", "- p\n+ q", in_message=True),
               M("a__mutmut_4", "a.py", "survived", "- u\n+ v"),
               M("a__mutmut_5", "a.py", "survived", "- s\n+ t"),
               M("a__mutmut_6", "a.py", "not checked", ""),
               M("a__mutmut_7", "a.py", "no test", "- m\n+ n")]
    reasons = {"a__mutmut_2": {"change": "- x\n+ y\n", "why": "same numbers"},
               "a__mutmut_5": {"change": "- s\n+ other", "why": "written for another change"},
               "gone__mutmut_1": {"change": "- g\n+ h", "why": "a mutant no longer made"}}
    text, problems = report.build(mutants, reasons, "mutmut 3.8.1")
    assert "| `a.py` | 7 | 1 | 1 | 1 | 3 | 1 | 40.0% |" in text
    assert sorted(problems) == sorted([
        "a__mutmut_4: survived and not explained",
        "a__mutmut_5: equivalent.toml's change no longer matches the mutant",
        "a__mutmut_6: not checked (the run did not finish)",
        "a__mutmut_7: no test and not explained",
        "gone__mutmut_1: in equivalent.toml but no such mutant"])
    assert "- `a__mutmut_2`: same numbers" in text and "- `a__mutmut_3`" in text
    assert "mutmut 3.8.1, core sources" in text
    assert "**Partial:** the run that wrote this report checked 6 of 7 mutants" in text


def test_each_planted_bug_still_finds_its_line():
    """experiments/mutation/planted_bugs.py replaces the first occurrence of a line of the
    sources by its bug: each line must still be there, or the check would plant nothing."""
    sys.path.insert(0, str(ROOT / "experiments" / "mutation"))
    import planted_bugs

    for bug, path, original, planted, tests in planted_bugs.BUGS:
        assert original in (ROOT / path).read_text(), bug
        assert original != planted and all((ROOT / d).is_dir() for d in tests.split()), bug


def test_a_killed_mutant_with_a_reason_is_a_stale_reason():
    """mutmut numbers a function's mutants in order, so an edit renumbers them: a reason left
    on a mutant that is now killed belonged to another change and is reported."""
    mutants = [report.Mutant("a__mutmut_1", "a.py", "killed", "")]
    _, problems = report.build(mutants, {"a__mutmut_1": {"change": "- x\n+ y", "why": "old"}},
                               "mutmut 3.8.1")
    assert problems == ["a__mutmut_1: killed, yet explained in equivalent.toml"]

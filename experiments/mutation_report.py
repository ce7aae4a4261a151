"""The mutation-testing report of linrec's numerical core, from a finished `mutmut run`.

    OMP_NUM_THREADS=1 mutmut run                # in the checkout: every mutant of the core
    python experiments/mutation_report.py       # -> experiments/mutation/REPORT.md

The core is `[tool.mutmut] only_mutate` of pyproject.toml. mutmut leaves each file's verdicts in
`mutants/<file>.meta`; this script counts them per module and lists every mutant the tests did
not kill. A survivor is either *equivalent* (it computes the same numbers as the original on
every input the code can receive), with its reason in `experiments/mutation/equivalent.toml`, or
*unexplained*, which is a gap in the tests. The script exits 1 when a survivor is unexplained,
when a mutant was not checked, or when a reason no longer matches its mutant's change (the
numbering of mutants follows the code, so a reason names the change it was written for).

The report records a hash of the core's sources; `tests/test_mutation_report.py` fails when the
core changes without the report being regenerated.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "mutation" / "REPORT.md"
EQUIVALENT = ROOT / "experiments" / "mutation" / "equivalent.toml"
COMMAND = "OMP_NUM_THREADS=1 mutmut run && python experiments/mutation_report.py"
#: mutmut's statuses that count as killed: a timeout is the CPU-time limit stopping a mutant
#: that loops, a segfault the test process dying on it; either way its tests did not pass
KILLED = {"killed", "timeout", "segfault", "caught by type check"}


def verdict(exit_code: int | None) -> str:
    """The report's verdict of a mutmut exit code, by mutmut's own status of that code."""
    from mutmut.stats import status_by_exit_code

    status = status_by_exit_code[exit_code]
    return "killed" if status in KILLED else status


def core_files() -> list[Path]:
    """The mutated sources (pyproject.toml's only_mutate, globs expanded), sorted."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["mutmut"]["only_mutate"]
    return sorted({p for pattern in patterns for p in ROOT.glob(pattern) if p.is_file()})


def core_hash() -> str:
    """sha256 over the core's paths and contents: what the report was computed from."""
    digest = hashlib.sha256()
    for path in core_files():
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Mutant:
    name: str
    module: str
    verdict: str
    change: str  # the mutated lines of its diff ("- old" / "+ new"), joined by newlines
    in_message: bool = False  # every changed line lies in a raise statement (its message)


def changed_old_lines(diff: str) -> list[int]:
    """The 1-based lines, within the original function's code, that a unified diff changes."""
    lines, old = [], 0
    for line in diff.splitlines():
        if line.startswith("@@"):
            old = int(line.split()[1].split(",")[0][1:])
        elif line.startswith(("+++", "---")):
            continue
        elif line.startswith("-"):
            lines.append(old)
            old += 1
        elif line.startswith(" "):
            old += 1
    return lines


def function_node(tree: ast.Module, mutant_name: str) -> ast.FunctionDef | None:
    """The function of a mutant: `pkg.module.x_name__mutmut_N` (a module function) or
    `pkg.module.xǁClassǁname__mutmut_N` (a method)."""
    mangled = mutant_name.rpartition(".")[2].rsplit("__mutmut_", 1)[0]
    if mangled.startswith("xǁ"):
        _, cls, name = mangled.split("ǁ")
        scopes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    else:
        name, scopes = mangled[2:], [tree]
    for scope in scopes:
        for node in scope.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return node
    return None


def only_in_raise(source: str, mutant_name: str, diff: str) -> bool:
    """Whether every line the mutant changes lies inside a `raise` statement of its function:
    the mutant changes an error's message, never a number (the condition that raises is
    outside the statement, and mutating it is not classified here)."""
    node = function_node(ast.parse(source), mutant_name)
    changed = changed_old_lines(diff)
    if node is None or not changed:
        return False
    start = min([d.lineno for d in node.decorator_list] + [node.lineno])
    raises = [(r.lineno, r.end_lineno) for r in ast.walk(node) if isinstance(r, ast.Raise)]
    return all(any(lo <= start + line - 1 <= hi for lo, hi in raises) for line in changed)


def _change(name: str, path: str) -> tuple[str, bool]:
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    diff = get_diff_for_mutant(name, path=path)
    change = "\n".join(line.strip() for line in diff.splitlines()
                       if line[:1] in "+-" and not line.startswith(("+++", "---")))
    return change, only_in_raise((ROOT / path).read_text(), name, diff)


def read_mutants() -> list[Mutant]:
    """Every mutant of the core with its verdict (mutants/<file>.meta, written by mutmut)."""
    import json

    found = []
    for source in core_files():
        rel = source.relative_to(ROOT)
        meta = ROOT / "mutants" / (str(rel) + ".meta")
        if not meta.exists():
            raise SystemExit(f"{meta}: missing; run `mutmut run` in {ROOT} first")
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        for name, code in sorted(codes.items()):
            status = verdict(code)
            change, in_message = ("", False) if status in ("killed", "not checked") \
                else _change(name, str(rel))
            found.append(Mutant(name, str(rel), status, change, in_message))
    return found


def read_reasons() -> dict[str, dict[str, str]]:
    """equivalent.toml: `[[mutant]]` tables of name, change (as this script prints it), why."""
    if not EQUIVALENT.exists():
        return {}
    entries = tomllib.loads(EQUIVALENT.read_text()).get("mutant", [])
    return {e["name"]: e for e in entries}


def _fence(text: str) -> str:
    return "```diff\n" + text + "\n```"


def build(mutants: list[Mutant], reasons: dict[str, dict[str, str]],
          tool: str) -> tuple[str, list[str]]:
    """The report's Markdown and its problems (empty when every survivor is explained); `tool`
    names the mutation tester and its version (``mutmut 3.8.1``)."""
    problems: list[str] = []
    per_module: dict[str, Counter] = {}
    equivalent, messages, unexplained = [], [], []
    for m in mutants:
        counts = per_module.setdefault(m.module, Counter())
        if m.verdict in ("killed", "not checked"):
            counts[m.verdict] += 1
            if m.verdict == "not checked":
                problems.append(f"{m.name}: not checked (the run did not finish)")
            elif m.name in reasons:  # renumbered mutants leave reasons on others
                problems.append(f"{m.name}: killed, yet explained in equivalent.toml")
            continue
        reason = reasons.get(m.name)
        # a mutant no test reaches (an abstract method's signature) needs a reason as well
        if m.verdict in ("survived", "no tests") and reason and \
                reason["change"].strip() == m.change:
            counts["equivalent"] += 1
            equivalent.append((m, reason["why"]))
        elif m.verdict == "survived" and m.in_message:
            counts["message"] += 1
            messages.append(m)
        else:
            counts["unexplained"] += 1
            unexplained.append(m)
            problems.append(f"{m.name}: equivalent.toml's change no longer matches the mutant"
                            if reason else f"{m.name}: {m.verdict} and not explained")
    stale = sorted(set(reasons) - {m.name for m in mutants})
    problems += [f"{name}: in equivalent.toml but no such mutant" for name in stale]

    def row(label: str, c: Counter) -> str:
        judged = c["killed"] + c["equivalent"] + c["unexplained"]
        score = f"{(c['killed'] + c['equivalent']) / judged:.1%}" if judged else "–"
        return (f"| {label} | {sum(c.values())} | {c['killed']} | {c['equivalent']} | "
                f"{c['message']} | {c['unexplained']} | {c['not checked']} | {score} |")

    total: Counter = Counter()
    for c in per_module.values():
        total.update(c)
    lines = [
        "# Mutation testing of the numerical core",
        "",
        f"Regenerate with `{COMMAND}` (docs/howto/mutation-testing.md); "
        f"{tool}, core sources {core_hash()}.",
        "",
        "A mutant is *killed* when a test fails on it (a CPU-time timeout counts: the mutant "
        "looped; so does a test process that crashed on it). A survivor is *equivalent* (the "
        "reason below says why it computes the same numbers on every input the code can "
        "receive, or where it says so, the same up to rounding, or the same on every instance "
        "tried with the narrow window where it could differ named, or, in code that only a "
        "CUDA device runs, that no test reaches it on a machine without one: the CUDA tests "
        "do), *message only* (every line "
        "it changes lies in a `raise` statement: the text of an error, not a number), or "
        "*unexplained*: a gap in the tests (a mutant that no test reaches, *no tests*, counts "
        "as a survivor). *Not checked*: the run stopped before the mutant. "
        "The score is (killed + equivalent) / (killed + equivalent + unexplained).",
        "",
        "| module | mutants | killed | equivalent | message only | unexplained | not checked "
        "| score |",
        "|---|---|---|---|---|---|---|---|",
        *[row(f"`{module}`", c) for module, c in per_module.items()],
        row("**all**", total),
    ]
    if total["not checked"]:
        checked = sum(total.values()) - total["not checked"]
        lines += ["", f"**Partial:** the run that wrote this report checked {checked} of "
                      f"{sum(total.values())} mutants; `mutmut run` continues it."]
    lines += ["", "## Unexplained survivors", ""]
    if not unexplained:
        lines.append("None.")
    for m in unexplained:
        lines += [f"- `{m.name}` ({m.verdict})", "", _fence(m.change), ""]
    lines += ["", "## Equivalent mutants", ""]
    if not equivalent:
        lines.append("None listed.")
    for m, why in equivalent:
        lines += [f"- `{m.name}`: {why}", "", _fence(m.change), ""]
    lines += ["", "## Message-only survivors", ""]
    lines += [f"- `{m.name}`" for m in messages] or ["None."]
    return "\n".join(lines).rstrip() + "\n", problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    import os

    os.chdir(ROOT)  # mutmut reads mutants/ relative to the working directory
    mutants = read_mutants()
    from importlib.metadata import version

    text, problems = build(mutants, read_reasons(), f"mutmut {version('mutmut')}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    killed = sum(m.verdict == "killed" for m in mutants)
    print(f"mutation report: {len(mutants)} mutants, {killed} killed, "
          f"{len(problems)} problem(s) -> {args.out}")
    unchecked = sum("not checked" in p for p in problems)
    if unchecked:
        print(f"  {unchecked} mutants not checked: run `mutmut run` to finish", file=sys.stderr)
    for problem in [p for p in problems if "not checked" not in p]:
        print(f"  {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Plant known one-token bugs, one at a time, in a throwaway worktree of HEAD and run the fast
tests (`-m "not slow"`) of the bug's area: each must fail at least one test by that test's own
comparison, not only by one of linrec's internal checks (an ArithmeticError).

    python experiments/mutation/planted_bugs.py      # about 3 minutes on 2 cores

Prints one line per bug: how many tests failed and the first few; exits 1 when a bug survives.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: (bug, file, original text, planted text, test directories)
BUGS = [
    ("debiased InfoNCE: the sign of log(1 − τ⁺)", "linrec/models/losses.py",
     "- torch.log1p(-tau)\n", "+ torch.log1p(-tau)\n", "tests/models"),
    ("MF trainer: the temperature division dropped", "linrec/models/mf.py",
     "            user_rows = user_rows / t\n", "            user_rows = user_rows\n",
     "tests/models"),
    ("NDCG: the discount's denominator log2(R + 2)", "linrec/eval/metrics.py",
     "1.0 / np.log2(ranks + 1.0)", "1.0 / np.log2(ranks + 2.0)", "tests/eval"),
    ("recall: divided by min(K, |T|)", "linrec/eval/metrics.py",
     "        return hits / m\n", "        return hits / np.minimum(k, m)\n", "tests/eval"),
    ("EASE: 2λ on the diagonal", "linrec/models/ease.py",
     "add_to_diagonal(G, self.lam)", "add_to_diagonal(G, 2 * self.lam)", "tests/models"),
    ("EASE: the diagonal left unzeroed", "linrec/models/linalg.py",
     "    np.fill_diagonal(P, 0.0)\n    return P\n", "    return P\n", "tests/models"),
    ("EM: Aᵀπ taken before π's update", "linrec/eval/estimators/em.py",
     "        pi[lo : lo + block] *= rows @ ratio\n"
     "        new_mix += rows.T @ pi[lo : lo + block]\n",
     "        new_mix += rows.T @ pi[lo : lo + block]\n"
     "        pi[lo : lo + block] *= rows @ ratio\n",
     "tests/eval"),
    ("unbiased rank: N/(n − 1) for (N − 1)/(n − 1)", "linrec/eval/estimators/corrected.py",
     "(ranks - 1.0) * (n_items - 1) / (sample_size - 1)",
     "(ranks - 1.0) * n_items / (sample_size - 1)", "tests/eval"),
]


def failures(tree: Path, tests: str) -> tuple[list[str], str]:
    """The FAILED lines of the fast tests under `tests` in `tree`, and pytest's last line."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:randomly",
         "-p", "no:cacheprovider", "-n", "2", "-rf", *tests.split()],
        cwd=tree, capture_output=True, text=True).stdout
    lines = out.strip().splitlines()
    return [line for line in lines if line.startswith("FAILED")], lines[-1] if lines else ""


def main() -> int:
    survived = 0
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "tree"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), "HEAD"],
                       cwd=ROOT, check=True)
        try:
            for bug, path, original, planted, tests in BUGS:
                source = tree / path
                text = source.read_text()
                if original not in text:
                    print(f"{bug}: {path} no longer holds the planted line; update BUGS")
                    survived += 1
                    continue
                source.write_text(text.replace(original, planted, 1))
                try:
                    failed, last = failures(tree, tests)
                finally:
                    source.write_text(text)
                by_test = [line for line in failed if "ArithmeticError" not in line]
                survived += not by_test
                print(f"{bug}: {len(by_test)} of {len(failed)} failures by a test's comparison "
                      f"({last})")
                for line in by_test[:2]:
                    print(f"    {line[:160]}")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())

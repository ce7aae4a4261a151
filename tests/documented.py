"""The commands the documentation shows, and how the tests run them
(tests/test_documented_commands.py).

Sources: the ```bash and ```python blocks of README.md, experiments/README.md and docs/**/*.md,
and the command lines of the YAML presets' header comments (`#   linrec ...`). A page's blocks run
in order in one working directory, as a reader types them: a bash block command by command
(`NAME=value` and `export` lines set variables for the later ones), consecutive python blocks as
one script.

Real data files are replaced by small files in the same formats (`StandIns`), and the sizes by
small ones: a copy of conf/ whose defaults are shrunk (`shrunk_conf`: fewer users, epochs,
negatives, repeats; no figures) and, on the command line, the explicit values that would take long
(`shrink_token`; a sweep over more than three values runs three of them, a joblib launcher one job
at a time); reports are drawn without figures (`--no-figures`), which the report tests draw.
Everything else of the command runs as written, in a child forked from an interpreter that
has already imported linrec's dependencies (tests/forkserver.py): the same `python -c` a user's
command is, without the seconds of imports each one would repeat.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tests.conftest import COMMANDS, check_new_records
from tests.forkserver import ForkServer

ROOT = Path(__file__).resolve().parents[1]
#: the console scripts the documentation runs, as Python code
PROGRAMS = COMMANDS
#: documented commands the tests do not run here, by their first words, and why
NOT_RUN_HERE = {
    "python3 -m venv": "the install: .ci/run runs the README's quick start from a clean checkout",
    ".venv/bin/pip install": "the install: .ci/run runs the README's quick start",
    "pip install": "an install; .ci/run installs exactly as the README says",
    ".venv/bin/python -m pytest": "the test suite itself",
    "python -m pytest": "the test suite itself",
    ".venv/bin/ruff": "the linter, a contributor's tool",
    ".venv/bin/python .ci/versions.py": "regenerates CI's version lock (CI runs its check)",
    "python experiments/same_numbers.py": "compares two git revisions; tests/test_same_numbers.py "
                                          "runs it",
    ".venv/bin/python -m sphinx": "builds this documentation; tests/test_docs.py builds it",
    ".venv/bin/sphinx-build": "builds this documentation; tests/test_docs.py builds it",
    "sphinx-build": "builds this documentation; tests/test_docs.py builds it",
    ".venv/bin/mutmut": "mutation testing, hours on 2 cores; tests/test_mutation_report.py checks "
                        "its committed report",
    "mutmut": "mutation testing, hours on 2 cores; tests/test_mutation_report.py checks its "
              "committed report",
    "rm mutants/mutmut-stats.json": "resets a mutmut run's test mapping (mutants/ is not in "
                                    "git)",
    ".venv/bin/python experiments/mutation/planted_bugs.py": "runs the fast tests eight times "
                                                             "(4 min); tests/"
                                                             "test_mutation_report.py checks "
                                                             "that its bugs still apply",
    ".venv/bin/python experiments/mutation_report.py": "reads a mutmut run's mutants/ (not in "
                                                       "git); tests/test_mutation_report.py "
                                                       "tests what it writes",
}


@dataclass
class Block:
    """One code block (or one preset's header commands): where it is and its text."""

    source: Path
    line: int
    language: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.source.relative_to(ROOT)}:{self.line}"


def markdown_sources() -> list[Path]:
    docs = [p for p in sorted((ROOT / "docs").rglob("*.md"))
            if not {"_build", "_generated"} & set(p.relative_to(ROOT / "docs").parts)]
    return [ROOT / "README.md", ROOT / "experiments" / "README.md", *docs]


def markdown_blocks(path: Path) -> list[Block]:
    blocks, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\S*)", lines[i])  # also MyST's ```{directive}
        if fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            if fence.group(1) in ("bash", "python"):
                blocks.append(Block(path, i + 2, fence.group(1), "\n".join(lines[i + 1:end])))
            i = end
        i += 1
    return blocks


def preset_blocks(path: Path) -> list[Block]:
    """The command lines of a YAML file's header comment: lines `#   linrec ...` (and variable
    lines `#   NAME=value` they use), with their backslash continuations."""
    commands, start, current = [], 0, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if current:
            current.append(text)
        elif re.match(r"(linrec|linrec-report|linrec-recommend) |[A-Z]\w*=\S", text):
            start, current = number, [text]
        if current and not text.endswith("\\"):
            commands.append(Block(path, start, "bash", "\n".join(current)))
            current = []
    return commands


def documented_pages() -> dict[Path, list[Block]]:
    """Every source with at least one block, in a stable order."""
    pages = {path: markdown_blocks(path) for path in markdown_sources()}
    for path in sorted((ROOT / "conf").rglob("*.yaml")):
        pages[path] = preset_blocks(path)
    return {path: blocks for path, blocks in pages.items() if blocks}


# ---------------------------------------------------------------------------------------------
# bash: logical lines, variables, commands


@dataclass
class Command:
    """One command of a bash block: its words after variable expansion, and the line shown."""

    words: list[str]
    shown: str
    line: int


def _logical_lines(text: str, first_line: int) -> list[tuple[int, str]]:
    out, buffer, start = [], "", first_line
    for offset, raw in enumerate(text.splitlines()):
        if not buffer:
            start = first_line + offset
        if raw.rstrip().endswith("\\"):
            buffer += raw.rstrip()[:-1] + " "
            continue
        out.append((start, buffer + raw))
        buffer = ""
    if buffer:
        out.append((start, buffer))
    return out


def _expand(text: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), text)


def bash_commands(block: Block, variables: dict[str, str]) -> list[Command]:
    """The commands of a bash block; `NAME=value` and `export NAME=value` update `variables`."""
    commands = []
    for line, text in _logical_lines(block.text, block.line):
        lexer = shlex.shlex(_expand(text, variables), posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token not in (";", "&&"):
                words.append(token)
                continue
            if words and words[0] == "export":
                words = words[1:]
            if len(words) == 1 and re.match(r"^\w+=", words[0]):
                name, _, value = words[0].partition("=")
                variables[name] = value
            elif words:
                commands.append(Command(words, text.strip(), line))
            words = []
    return commands


def without_environment(words: list[str]) -> list[str]:
    """The command's words after its leading `NAME=value` environment assignments."""
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        words = words[1:]
    return words


def program_of(words: list[str]) -> str | None:
    words = without_environment(words)
    name = words[0].removeprefix(".venv/bin/") if words else ""
    return name if name in PROGRAMS else None


def not_run_reason(words: list[str]) -> str | None:
    text = " ".join(without_environment(words))
    return next((why for start, why in NOT_RUN_HERE.items() if text.startswith(start)), None)


# ---------------------------------------------------------------------------------------------
# small stand-ins for the real data files


@dataclass
class StandIns:
    """Small files, in the formats of the real ones, for the paths the documentation names."""

    root: Path
    made: dict[str, Path] = field(default_factory=dict)

    #: documented path (a prefix of a token's value) -> the writer of its stand-in
    WRITERS = {
        "/data/gowalla": "lightgcn", "/data/yelp2018": "lightgcn",
        "/data/amazon-book": "lightgcn", "/data/ml-20m.zip": "ml20m_zip",
        "/shared/data/ml-20m.zip": "ml20m_zip", "/data/ml-1m/ratings.dat": "ml1m_dat",
        "/data/netflix/training_set": "netflix", "/data/train_triplets.txt": "msd",
        "/data/ncf/ml-1m": "ncf", "/data/ncf": "ncf",
    }

    def path_for(self, documented: str) -> Path:
        if documented not in self.made:
            kind = self.WRITERS[documented]
            target = self.root / documented.strip("/").replace("/", "_")
            getattr(self, f"_write_{kind}")(target)
            self.made[documented] = target
        return self.made[documented]

    @staticmethod
    def _events(n_users: int = 300, n_items: int = 300, seed: int = 0):
        """(user, item, rating, timestamp) rows with popularity skew: every user 15-40 items,
        60 % of the ratings 4 or 5 (as in MovieLens)."""
        rng = np.random.default_rng(seed)
        weights = 1.0 / np.arange(1, n_items + 1) ** 0.5
        rows = []
        for user in range(n_users):
            k = int(rng.integers(15, 41))
            items = rng.choice(n_items, size=k, replace=False, p=weights / weights.sum())
            ratings = rng.choice(5, size=k, p=[0.05, 0.1, 0.25, 0.35, 0.25]) + 1
            for item, rating in zip(items, ratings, strict=True):
                rows.append((user, int(item), int(rating),
                             int(1_500_000_000 + rng.integers(0, 10**7))))
        return rows

    def _write_lightgcn(self, target: Path) -> None:
        target.mkdir(parents=True)
        by_user: dict[int, list[int]] = {}
        for user, item, _, _ in self._events():
            by_user.setdefault(user, []).append(item)
        with open(target / "train.txt", "w") as train, open(target / "test.txt", "w") as test:
            for user, items in by_user.items():
                train.write(" ".join(map(str, [user, *items[3:]])) + "\n")
                test.write(" ".join(map(str, [user, *items[:3]])) + "\n")

    def _write_ml20m_zip(self, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        # every user rates >= 12 items, most of them >= 4: enough for the strong split's filters
        rows = self._events()
        text = "userId,movieId,rating,timestamp\n" + "".join(
            f"{u + 1},{i + 1},{r},{t}\n" for u, i, r, t in rows)
        with zipfile.ZipFile(target, "w") as archive:
            archive.writestr("ml-20m/ratings.csv", text)

    def _write_ml1m_dat(self, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(f"{u + 1}::{i + 1}::{r}::{t}\n"
                                  for u, i, r, t in self._events()))

    def _write_netflix(self, target: Path) -> None:
        target.mkdir(parents=True)
        by_movie: dict[int, list[str]] = {}
        for u, i, r, t in self._events():
            day = time.strftime("%Y-%m-%d", time.gmtime(t))
            by_movie.setdefault(i + 1, []).append(f"{u + 1},{r},{day}")
        for movie, lines in by_movie.items():
            (target / f"mv_{movie:07d}.txt").write_text(f"{movie}:\n" + "\n".join(lines) + "\n")

    def _write_msd(self, target: Path) -> None:
        # the published filters keep users with >= 20 songs and songs with >= 200 users
        target.parent.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(1)
        lines = []
        for user in range(300):
            for song in rng.choice(150, size=110, replace=False):
                lines.append(f"u{user:040d}\tSO{song:016d}\t{int(rng.integers(1, 9))}\n")
        target.write_text("".join(lines))

    def _write_ncf(self, target: Path) -> None:
        target.mkdir(parents=True, exist_ok=True)
        rows = self._events()
        rng = np.random.default_rng(2)
        last: dict[int, tuple] = {}
        for row in rows:
            last[row[0]] = row
        train = [r for r in rows if last[r[0]] is not r]
        with open(target / "ml-1m.train.rating", "w") as fh:
            fh.writelines(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in train)
        with open(target / "ml-1m.test.rating", "w") as fh:
            fh.writelines(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in last.values())
        seen: dict[int, set[int]] = {}
        for u, i, _, _ in rows:
            seen.setdefault(u, set()).add(i)
        with open(target / "ml-1m.test.negative", "w") as fh:
            for u, i, _, _ in last.values():
                pool = np.setdiff1d(np.arange(300), sorted(seen[u]))
                negatives = rng.choice(pool, size=99, replace=False)
                fh.write(f"({u},{i})\t" + "\t".join(map(str, negatives)) + "\n")

    def tabular(self, path: Path) -> Path:
        """events.csv in the working directory, with every column name the pages use."""
        rows = self._events()
        path.write_text("user_id,item_id,uid,iid,user,item,rating,ts\n" + "".join(
            f"{u},{i},{u},{i},{u},{i},{r},{t}\n" for u, i, r, t in rows))
        return path


# ---------------------------------------------------------------------------------------------
# shrinking


#: config field -> the small value tests use (in the conf copy and for explicit values);
#: a joblib launcher's n_jobs=1 runs its jobs in the command's own process (no worker processes
#: that import everything again; tests/test_sweeps.py runs the launchers with workers)
SMALL_VALUES = {"epochs": 1, "iterations": 2, "n_iter": 5, "max_iter": 50, "n_negatives": 8,
                "n_positives": 2, "repeats": 2, "n_valid_users": 20, "n_test_users": 20,
                "sample_size": 100, "n_jobs": 1}
#: a sweep over more values runs its first, middle and last (the code each job runs is the same)
MAX_SWEEP_VALUES = 3
#: the synthetic data's size in the tests
SYNTHETIC_SIZE = {"n_users": 400, "n_items": 600}


def _shrink_values(node):
    """A YAML node with the long-running values of SMALL_VALUES (and grids of ranks, sample
    sizes) made small, recursively."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key in SMALL_VALUES and isinstance(value, int) and value > SMALL_VALUES[key]:
                out[key] = SMALL_VALUES[key]
            elif key == "sample_sizes" and isinstance(value, list):
                out[key] = [v for v in value if v <= 100] or [50]
            elif key == "grid" and isinstance(value, dict) and "rank" in value:
                out[key] = {**_shrink_values(value), "rank": [8, 16]}
            elif key == "factors" and isinstance(value, list):
                out[key] = [4]
            else:
                out[key] = _shrink_values(value)
        return out
    if isinstance(node, list):
        return [_shrink_values(v) for v in node]
    return node


def shrunk_conf(target: Path) -> Path:
    """A copy of conf/ with small defaults: every YAML's long-running values (SMALL_VALUES),
    the trained models' epochs, the synthetic data's size, no figures and no printed table."""
    import shutil

    from omegaconf import OmegaConf

    from linrec.models.configs import MODEL_CONFIGS

    shutil.copytree(ROOT / "conf", target)
    for path in sorted(target.rglob("*.yaml")):
        header = [line for line in path.read_text().splitlines()
                  if line.startswith("# @package")]
        node = OmegaConf.to_container(OmegaConf.load(path))
        node = _shrink_values(node) if isinstance(node, dict) else node
        name = path.stem
        if path.parent.name == "model" and name in MODEL_CONFIGS:
            fields = MODEL_CONFIGS[name].names()
            node.update({k: v for k, v in SMALL_VALUES.items() if k in fields})
            if "sampling" in fields:
                node["sampling"] = {"n_negatives": 8, "n_positives": 2}
        if path.relative_to(target).as_posix() == "data/synthetic.yaml":
            node["source"] = dict(SYNTHETIC_SIZE)
        if path.relative_to(target).as_posix() == "config.yaml":
            node.update(figures=False, quiet=True)
        text = OmegaConf.to_yaml(OmegaConf.create(node)) if node else ""
        path.write_text("\n".join(header + [text]))
    return target


def shrink_token(word: str, stand_ins: StandIns, workdir: Path) -> str:
    """A command-line word with a real data path replaced by its stand-in and a long-running
    explicit value made small."""
    key, eq, value = word.partition("=")
    if not eq:
        return word
    for documented in sorted(StandIns.WRITERS, key=len, reverse=True):
        if value == documented:
            return f"{key}={stand_ins.path_for(documented)}"
    if value == "events.csv" and not (workdir / "events.csv").exists():
        stand_ins.tabular(workdir / "events.csv")
    leaf = key.rpartition(".")[2]
    numbers = value.strip("[]").split(",")
    if leaf in SMALL_VALUES and all(n.isdigit() for n in numbers):
        small = SMALL_VALUES[leaf]
        values = sorted({min(int(n), small) for n in numbers})
        return f"{key}={','.join(map(str, values))}"
    if leaf == "n_trials" and value.isdigit():
        return f"{key}={max(1, int(value) // 10)}"
    if leaf == "rank" and all(n.isdigit() for n in numbers) and max(map(int, numbers)) > 256:
        values = ",".join(str(8 * (i + 1)) for i in range(len(numbers)))
        return f"{key}=[{values}]" if value.startswith("[") else f"{key}={values}"
    if leaf == "sample_sizes" and all(n.isdigit() for n in numbers):
        kept = [n for n in numbers if int(n) <= 100] or ["50"]
        return f"{key}=[{','.join(kept)}]"
    if len(numbers) > MAX_SWEEP_VALUES and re.fullmatch(r"[\w.+-]+(,[\w.+-]+)+", value):
        spread = np.linspace(0, len(numbers) - 1, MAX_SWEEP_VALUES).round().astype(int)
        return f"{key}={','.join(numbers[i] for i in spread)}"
    if value.startswith("/") and not Path(value).exists() and "dir" not in key:
        raise LookupError(f"{word}: a path without a stand-in (add one to StandIns.WRITERS)")
    return word


# ---------------------------------------------------------------------------------------------
# running a page


#: submitit's SLURM launcher writes the job script it would submit (job.sbatch) and stops; a
#: stand-in `srun` on PATH lets it start without a cluster
SLURM_STAND_IN = """\
import pathlib, submitit
def _capture(self, fn, *iterables):
    script = self._executor._make_submission_file_text("python -m the_job", "uid")
    pathlib.Path("job.sbatch").write_text(script)
    raise SystemExit(0)
submitit.AutoExecutor.map_array = _capture
"""


def _with_srun(env: dict[str, str], workdir: Path) -> dict[str, str]:
    bin_dir = workdir / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    return dict(env, PATH=f"{bin_dir}{os.pathsep}{env['PATH']}")


@dataclass
class Outcome:
    """What running one documented command (or script) gave."""

    where: str
    shown: str
    ran: str
    returncode: int
    output: str
    seconds: float = 0.0


def run_page(blocks: list[Block], workdir: Path, env: dict[str, str], stand_ins: StandIns,
             server: ForkServer, timeout: float = 900) -> list[Outcome]:
    """Run a page's blocks in order in `workdir` (see the module docstring), each command in a
    child of `server` (as a fresh `python -c`, without its seconds of imports)."""
    workdir.mkdir(parents=True, exist_ok=True)
    outcomes: list[Outcome] = []
    variables = {"USER": "tester", "HOME": str(workdir)}
    run_env = dict(env)
    pending_python: list[Block] = []

    def flush_python() -> None:
        if not pending_python:
            return
        script = workdir / f"page_{len(outcomes)}.py"
        script.write_text("\n\n".join(b.text for b in pending_python))
        started = time.time()
        proc = server.run(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')",
                          [], workdir, run_env, timeout)
        check_new_records(workdir, since=started)
        outcomes.append(Outcome(pending_python[0].where, "(python blocks)", str(script),
                                proc.returncode, proc.stdout[-3000:] + proc.stderr[-3000:],
                                time.time() - started))
        pending_python.clear()

    for block in blocks:
        if block.language == "python":
            pending_python.append(block)
            continue
        flush_python()
        for command in bash_commands(block, variables):
            for name, value in variables.items():
                if name.startswith("LINREC_"):
                    run_env[name] = value if name != "LINREC_DATA" else env["LINREC_DATA"]
            where = f"{block.source.relative_to(ROOT)}:{command.line}"
            program = program_of(command.words)
            if command.words == ["pip", "install", "./examples/plugin"]:
                outcomes.append(_install_example_plugin(workdir, run_env, where, command.shown))
                continue
            if program is None:
                reason = not_run_reason(command.words)
                outcomes.append(Outcome(where, command.shown, f"not run: {reason}",
                                        0 if reason else 1,
                                        "" if reason else "neither run nor in NOT_RUN_HERE"))
                continue
            words = without_environment(command.words)
            command_env = dict(run_env, **dict(
                w.partition("=")[::2] for w in command.words[:len(command.words) - len(words)]))
            try:
                args = [shrink_token(w, stand_ins, workdir) for w in words[1:]]
            except LookupError as exc:
                outcomes.append(Outcome(where, command.shown, "", 1, str(exc)))
                continue
            slurm = "hydra/launcher=submitit_slurm" in args
            prelude = SLURM_STAND_IN if slurm else ""
            if program == "linrec-report" and "--no-figures" not in args:
                args.append("--no-figures")  # as the shrunk conf's figures=false for runs
            if program == "linrec" and "-m" not in args and not any(
                    a.startswith(("hydra.run.dir=", "--")) for a in args):
                args.append(f"hydra.run.dir=outputs/run_{len(outcomes)}")
            started = time.time()
            proc = server.run(prelude + PROGRAMS[program], args, workdir,
                              _with_srun(command_env, workdir) if slurm else command_env,
                              timeout)
            check_new_records(workdir, since=started)
            outcomes.append(Outcome(where, command.shown, shlex.join([program, *args]),
                                    proc.returncode, proc.stdout[-3000:] + proc.stderr[-3000:],
                                    time.time() - started))
    flush_python()
    return outcomes


def _install_example_plugin(workdir: Path, run_env: dict[str, str], where: str,
                            shown: str) -> Outcome:
    """`pip install ./examples/plugin` as the page's later commands see it: the package
    installed with pip into a directory of the page's, put on the page's PYTHONPATH (the test
    environment itself stays as CI installed it)."""
    import subprocess
    import sys

    target = workdir / "plugin-site"
    started = time.time()
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps",
                           "--no-build-isolation", "--quiet", "--target", str(target),
                           str(ROOT / "examples" / "plugin")], capture_output=True, text=True,
                          timeout=600)
    paths = [p for p in run_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    run_env["PYTHONPATH"] = os.pathsep.join([str(target), *paths])
    return Outcome(where, shown, f"pip install --target {target} (on the page's PYTHONPATH)",
                   proc.returncode, proc.stdout[-3000:] + proc.stderr[-3000:],
                   time.time() - started)


def outcome_report(outcomes: list[Outcome]) -> str:
    failed = [o for o in outcomes if o.returncode != 0]
    return "\n\n".join(f"{o.where}: {o.shown}\n  ran: {o.ran}\n"
                       f"  exit {o.returncode} after {o.seconds:.1f} s\n"
                       + "\n".join("  | " + line for line in o.output.splitlines()[-25:])
                       for o in failed)


def results_in(workdir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(workdir.rglob("results.json"))]


def environment(cache: Path, conf: Path) -> dict[str, str]:
    return dict(os.environ, LINREC_DATA=str(cache), LINREC_CONF=str(conf), HYDRA_FULL_ERROR="0",
                COLUMNS="100")

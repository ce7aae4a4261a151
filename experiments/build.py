"""Build the results tables of experiments/README.md from the committed run records, so that no
reported number is typed by hand.

    python experiments/build.py            regenerate every table (and the grid figures)
    python experiments/build.py --check    exit 1 when a table differs from what the records give

A table sits between `<!-- table: <id> -->` and `<!-- /table -->`; its id names a function of
TABLES. A table reads only records (experiments/records/, written by experiments/record.py) and
the published values (experiments/published.toml, each with its source). A result that is not
in a record is in no table: a row whose runs are not recorded says so and gives its command.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

sys.path.insert(0, str(Path(__file__).resolve().parent))

from records import RECORDS, load_records, under  # noqa: E402

ROOT = Path(__file__).resolve().parent
README = ROOT / "README.md"
#: the pages whose tables the build writes
PAGES = (README, ROOT.parent / "docs" / "howto" / "optuna.md")
PUBLISHED = ROOT / "published.toml"
FIGURES = ROOT / "figures"
MARKER = re.compile(r"(<!-- table: (?P<id>[\w-]+) -->\n)(?P<body>.*?)(<!-- /table -->)",
                    re.DOTALL)

Records = Mapping[str, dict[str, Any]]


@dataclass(frozen=True)
class Context:
    records: Records
    published: Mapping[str, Any]


TABLES: dict[str, Callable[[Context], str]] = {}


def table(name: str):
    def register(function: Callable[[Context], str]) -> Callable[[Context], str]:
        TABLES[name] = function
        return function
    return register


# ---------------------------------------------------------------------------------------------
# formatting


def markdown(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def number(value: float | None, digits: int = 5) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}"


def seconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 120:
        return f"{value / 60:.1f} min"
    return f"{value:.1f} s"


def percent(value: float) -> str:
    """A relative change with its sign, "+5.0%" or "−2.4%"."""
    return f"{value:+.1%}".replace("-", "−")


def signed(value: float, digits: int = 4) -> str:
    return f"{value:+.{digits}f}".replace("-", "−")


def p_value(p: float) -> str:
    """'p < 0.001' or 'p = 0.042'."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


# ---------------------------------------------------------------------------------------------
# selection over a family's records


def metric(record: dict[str, Any], split: str, key: str) -> float | None:
    return record["splits"].get(split, {}).get("exact", {}).get(key)


def selected(records: Records, key: str = "recall@20") -> tuple[str, dict[str, Any]] | None:
    """The record with the best validation `key` (the family's tuned point), or None."""
    scored = [(metric(r, "valid", key), name, r) for name, r in records.items()
              if metric(r, "valid", key) is not None]
    if not scored:
        return None
    _, name, record = max(scored, key=lambda t: (t[0], t[1]))
    return name, record


def same_settings(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two model configs name the same fit: every field both have is equal, the
    execution-only ones (threads, device) aside."""
    return all(a[key] == b[key] for key in (a.keys() & b.keys()) - {"num_threads", "device"})


def grid_value(value: Any) -> Any:
    """A model field's value as a grid shows it: None (a field's default rule) as "null", the
    word a command line gives for it."""
    return "null" if value is None else value


def swept(records: Records) -> dict[str, list[Any]]:
    """The model fields whose values differ between the records (a family's grid), with their
    values in increasing order."""
    values: dict[str, set] = {}
    for record in records.values():
        for key, value in record["config"]["model"].items():
            if value is None or isinstance(value, (int, float, str)) and \
                    not isinstance(value, bool):
                values.setdefault(key, set()).add(grid_value(value))
    return {k: sorted(v, key=lambda x: (isinstance(x, str), x)) for k, v in values.items()
            if len(v) > 1 and k not in ("seed",)}


def grid_edges(record: dict[str, Any], grid: dict[str, list[Any]]) -> str:
    """Where the selected point lies on the edge of a numeric grid of three or more values:
    "; rank at the grid's top" (the optimum may lie beyond it), else ""."""
    model = record["config"]["model"]
    edges = []
    for key, values in grid.items():
        numbers = [v for v in values if not isinstance(v, str)]
        value = model.get(key)
        if len(numbers) < 3 or value not in numbers:
            continue
        if value == numbers[0]:
            edges.append(f"{key} at the grid's bottom")
        elif value == numbers[-1]:
            edges.append(f"{key} at the grid's top")
    return "".join(f"; {edge}" for edge in edges)


def setting(record: dict[str, Any], keys: Sequence[str]) -> str:
    model = record["config"]["model"]
    return ", ".join(f"{k} = {grid_value(model.get(k))}" for k in keys) or "defaults"


def sweep_command(records: Records) -> str:
    """One `linrec -m` command that runs every record of a family (their overrides, the swept
    ones joined by commas), as the records' own commands have them."""
    if len(records) == 1:
        return next(iter(records.values()))["command"]
    keys: dict[str, list[str]] = {}  # in the order the commands give them
    for record in records.values():
        for key, value in _overrides(record).items():
            if value not in keys.setdefault(key, []):
                keys[key].append(value)
    parts = []
    for key, values in keys.items():
        if len(values) > 1:
            values = sorted(values, key=_numeric_key)
        parts.append(f"{key}={','.join(values)}" if values != [""] else key)
    return "linrec -m " + " ".join(parts)


def _overrides(record: dict[str, Any]) -> dict[str, str]:
    """The key=value words of a record's command (a bare word maps to "")."""
    return dict(word.partition("=")[::2] for word in record["command"].split()[1:])


def sweep_commands(records: Records) -> list[str]:
    """`linrec -m` commands that together run every record of a family: one when the records
    form the full grid of their swept values, else one per value of the swept key with the
    fewest values (each part split again if it is still not a full grid)."""
    values: dict[str, set[str]] = {}
    for record in records.values():
        for key, value in _overrides(record).items():
            values.setdefault(key, set()).add(value)
    swept_keys = {key: v for key, v in values.items() if len(v) > 1}
    if len(records) <= 1 or math.prod(map(len, swept_keys.values())) == len(records):
        return [sweep_command(records)]
    key = min(swept_keys, key=lambda k: (len(swept_keys[k]), k))
    commands = []
    for value in sorted(swept_keys[key], key=_numeric_key):
        part = {name: r for name, r in records.items() if _overrides(r).get(key) == value}
        commands += sweep_commands(part)
    return commands


def _numeric_key(text: str) -> tuple[int, float | str]:
    try:
        return (0, float(text))
    except ValueError:
        return (1, text)


# ---------------------------------------------------------------------------------------------
# chapter 3 on Gowalla


#: the families of the chapter-3 table: record group -> row label
CH3_FAMILIES = {
    "most_popular": "ItemPop (most popular)",
    "itemknn": "ItemKNN (cosine)",
    "slim": "SLIM",
    "ease": "EASE",
    "dlae": "DLAE",
    "edlae": "EDLAE (full rank)",
    "debiased_ease": "debiased EASE",
    "lrr": "LRR",
    "puresvd": "PureSVD",
    "mf_closed": "MF, closed form (eq. 73)",
    "ials": "iALS",
    "mf_ccl": "MF-CCL (SimpleX's settings)",
}
CH3_KEYS = ("recall@20", "ndcg@20")
#: families served by one eigendecomposition of the Gram matrix (linrec.models.spectral): the
#: first job of their grids computes it and caches it on disk; every other job's fit reads it
CH3_SPECTRAL = ("lrr", "puresvd", "mf_closed")


def ch3_group(context: Context, family: str) -> Records:
    found = under(context.records, f"ch3/{family}")
    return {k: v for k, v in found.items() if "/compare/" not in k}


@table("ch3-gowalla")
def ch3_gowalla(context: Context) -> str:
    rows = []
    for family, label in CH3_FAMILIES.items():
        group = ch3_group(context, family)
        best = selected(group)
        published = context.published.get("gowalla", {}).get(family)
        shown = (f"{published['recall20']:.4f} / {published['ndcg20']:.4f} "
                 f"({published['source']})" if published else "–")
        if best is None:
            rows.append([label, "not recorded yet", "–", "–", "–", shown, "–"])
            continue
        name, record = best
        grid = swept(group)
        keys = list(grid)
        environment = record["environment"]
        fit = seconds(record["timings"].get("fit"))
        if family in CH3_SPECTRAL:
            fit += f" + the shared eigendecomposition ({seconds(spectrum_seconds(context))})"
        rows.append([
            label,
            f"{setting(record, keys)} (of {len(group)}{grid_edges(record, grid)})"
            if keys else "–",
            number(metric(record, "valid", "recall@20")),
            f"**{number(metric(record, 'test', 'recall@20'))} / "
            f"{number(metric(record, 'test', 'ndcg@20'))}**",
            shown,
            fit,
            f"{environment['cpu']}, {environment['threads']} thread(s)",
        ])
    return markdown(["model", "selected on validation Recall@20", "valid R@20",
                     "test R@20 / N@20", "published R@20 / N@20 (selected on test)", "fit",
                     "machine"], rows)


def spectrum_seconds(context: Context) -> float | None:
    """The eigendecomposition's time: the longest fit among the spectral families' records
    (the one job that computed it; the others read it in well under a minute)."""
    fits = [r["timings"].get("fit") for family in CH3_SPECTRAL
            for r in ch3_group(context, family).values()]
    fits = [f for f in fits if f is not None]
    return max(fits) if fits else None


@table("ch3-commands")
def ch3_commands(context: Context) -> str:
    lines = ["```bash"]
    for family in CH3_FAMILIES:
        group = ch3_group(context, family)
        if group:
            lines += sweep_commands(group)
    lines.append("```")
    return "\n".join(lines) + "\n"


@table("ch3-grids")
def ch3_grids(context: Context) -> str:
    """Every recorded grid point of every family: the validation value that selected, and the
    test values beside it (not used for the selection)."""
    rows = []
    for family, label in CH3_FAMILIES.items():
        group = ch3_group(context, family)
        keys = list(swept(group))
        if len(group) < 2:
            continue
        best = selected(group)
        for name, record in sorted(group.items(), key=lambda kv: _grid_order(kv[1], keys)):
            mark = " ◀" if best and name == best[0] else ""
            rows.append([label, setting(record, keys) + mark,
                         number(metric(record, "valid", "recall@20")),
                         number(metric(record, "test", "recall@20")),
                         number(metric(record, "test", "ndcg@20")),
                         seconds(record["timings"].get("fit"))])
    return markdown(["model", "setting (◀ selected)", "valid R@20", "test R@20", "test N@20",
                     "fit"], rows)


def _grid_order(record: dict[str, Any], keys: Sequence[str]) -> tuple:
    model = record["config"]["model"]
    return tuple(_numeric_key(str(model.get(k))) for k in keys)


# ---------------------------------------------------------------------------------------------
# chapter 4 on Gowalla: Table 12's column


#: Table 12's Gowalla rows: record group below ch4/ -> label
CH4_LOSSES = {
    "ccl": "CCL", "debiased_ccl": "debiased CCL", "mse": "MSE", "debiased_mse": "debiased MSE",
    "infonce": "InfoNCE", "debiased_infonce": "debiased InfoNCE", "mine": "MINE",
    "mine_plus": "MINE+",
}


def mean_std(values: Sequence[float]) -> str:
    if len(values) == 1:
        return number(values[0])
    return f"{statistics.fmean(values):.5f} ± {statistics.stdev(values):.5f}"


@table("ch4-gowalla")
def ch4_gowalla(context: Context) -> str:
    """Each loss of Table 12 on Gowalla: the published value and linrec's, as the mean ± std
    over the recorded seeds of one configuration."""
    published = context.published.get("table12_gowalla", {})
    rows = []
    for loss, label in CH4_LOSSES.items():
        group = under(context.records, f"ch4/{loss}")
        shown = published.get(loss)
        shown = f"{shown['recall20']:.4f} / {shown['ndcg20']:.4f}" if shown else "–"
        if not group:
            rows.append([label, shown, "not recorded yet", "–", "–", "–"])
            continue
        records = list(group.values())
        recall = [metric(r, "test", "recall@20") for r in records]
        ndcg = [metric(r, "test", "ndcg@20") for r in records]
        epochs = sorted({(len(r["training"]["epochs"]), r["training"]["best_epoch"])
                         for r in records if r.get("training")})
        rows.append([label, shown, f"{mean_std(recall)} / {mean_std(ndcg)}", len(records),
                     records[0].get("training", {}).get("selected_on", "–"),
                     ", ".join(f"{b} of {e}" for e, b in epochs) or "–"])
    return markdown(["loss", "Table 12 R@20 / N@20", "linrec test R@20 / N@20", "seeds",
                     "epochs selected on", "best epoch"], rows)


# ---------------------------------------------------------------------------------------------
# pruning an Optuna search (docs/howto/optuna.md)


@table("pruning")
def pruning(context: Context) -> str:
    """The same Optuna search over MF on Gowalla with each pruner: trials complete and pruned,
    epochs trained and wall time (each also as a share of the unpruned search's), the best
    validation value found; then each search's command."""
    searches = {name: context.records[f"pruning/{name}"]
                for name in ("none", "median", "hyperband") if f"pruning/{name}" in context.records}
    if not searches:
        return ("Not recorded yet: the two searches run with `hydra.sweeper.pruner=none` and "
                "`median` on `data=lightgcn data.path=/data/gowalla`, and "
                "`python experiments/record.py optuna SWEEP_DIR --as pruning/<pruner>` records "
                "each.\n")
    unpruned = searches.get("none")

    def share(record: dict[str, Any], key: str) -> str:
        if unpruned is None or record is unpruned or not unpruned.get(key) \
                or record.get(key) is None:
            return ""
        return f" ({record[key] / unpruned[key]:.0%})"

    rows = [[name, f"{record['complete']} / {record['pruned']}",
             f"{record['epochs']}{share(record, 'epochs')}",
             f"{seconds(record['seconds'])}{share(record, 'seconds')}",
             number(record["best_value"]),
             f"{record['environment']['cpu']}, {record['environment']['threads']} thread(s)"]
            for name, record in searches.items()]
    table_text = markdown(["pruner", "trials complete / pruned",
                           "epochs trained (share of none's)", "wall time (share of none's)",
                           "best valid value", "machine"], rows)
    commands = "\n".join(record["command"] for record in searches.values())
    return f"{table_text}\n```bash\n{commands}\n```\n"


# ---------------------------------------------------------------------------------------------
# findings


#: chapter-3 families whose fit draws random numbers (a seed): the others are deterministic
CH3_SEEDED = ("ials", "mf_ccl")


#: chapter 4's directions on Gowalla: (baseline loss, compared loss, question)
CH4_DIRECTIONS = (
    ("mse", "debiased_mse", "Does debiasing MSE raise MF's test Recall@20 on Gowalla?"),
    ("ccl", "debiased_ccl", "Does debiasing CCL raise MF's test Recall@20 on Gowalla?"),
    ("infonce", "debiased_infonce",
     "Does debiasing InfoNCE raise MF's test Recall@20 on Gowalla?"),
    ("infonce", "mine", "Does MINE beat InfoNCE in MF's test Recall@20 on Gowalla?"),
)
#: seeds a side before a gap is called a direction
DIRECTION_SEEDS = 3


def ch4_directions(context: Context) -> list[list[str]]:
    """A findings row per chapter-4 direction whose two losses both have records (Table 12's
    settings, `ch4/<loss>`): the gap of the seed means with the relative change, beside Table
    12's; the seeds' spread; Welch's t over seeds. Called a direction only with
    DIRECTION_SEEDS seeds a side and p < 0.05; otherwise "not shown"."""
    from scipy import stats

    rows = []
    published = context.published.get("table12_gowalla", {})
    for base, other, question in CH4_DIRECTIONS:
        groups = [list(under(context.records, f"ch4/{loss}").values()) for loss in (base, other)]
        if not all(groups):
            continue
        a, b = ([metric(r, "test", "recall@20") for r in group] for group in groups)
        gap = statistics.fmean(b) - statistics.fmean(a)
        effect = f"{signed(gap)} Recall@20 ({percent(gap / statistics.fmean(a))})"
        if base in published and other in published:
            reference = published[base]["recall20"]
            shown = published[other]["recall20"] - reference
            effect += f"; Table 12: {signed(shown)} ({percent(shown / reference)})"
        spread = "std " + " / ".join(
            f"{statistics.stdev(v):.5f}" if len(v) > 1 else "– (one seed)" for v in (a, b))
        if len(a) > 1 and len(b) > 1:
            p = stats.ttest_ind(b, a, equal_var=False).pvalue
            test = f"Welch t over seeds {p_value(p)}"
        else:
            p, test = None, "–"
        if min(len(a), len(b)) < DIRECTION_SEEDS:
            answer = f"not shown: {min(len(a), len(b))} seed(s) on a side, " \
                     f"{DIRECTION_SEEDS} needed"
        elif p >= 0.05:
            answer = "not shown: the gap lies within the seeds' spread"
        else:
            answer = "yes" if gap > 0 else "no: it lowers it"
        rows.append([question, answer, effect, spread, f"{len(a)} and {len(b)}", test,
                     "[table](#chapter-4-on-gowalla-table-12s-column)"])
    return rows


def unseeded(record: dict[str, Any]) -> dict[str, Any]:
    """A record's model settings without its seed."""
    return {k: v for k, v in record["config"]["model"].items() if k != "seed"}


def seeds_of(context: Context, families: Sequence[str]) -> str:
    """The seeds behind a comparison of the selected settings of `families`: "deterministic
    fits", or how many seeds each seeded family's selected setting was run with."""
    seeded = []
    for family in families:
        if family in CH3_SEEDED:
            best = selected(ch3_group(context, family))
            setting = unseeded(best[1])
            seeds = {r.get("seed") for r in ch3_group(context, family).values()
                     if unseeded(r) == setting}
            seeded.append(f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''} of "
                          f"{CH3_FAMILIES[family]}")
    return ", ".join(seeded) + " (the others deterministic)" if seeded else "deterministic fits"


@table("findings")
def findings(context: Context) -> str:
    rows = []
    ranked = []
    for family, label in CH3_FAMILIES.items():
        best = selected(ch3_group(context, family))
        if best is not None:
            ranked.append((metric(best[1], "test", "recall@20"), label, family, best))
    ranked.sort(reverse=True)
    if len(ranked) >= 2:
        (r1, l1, f1, b1), (r2, l2, f2, b2) = ranked[:2]
        comparison = context.records.get(f"ch3/compare/{f1}_vs_{f2}")
        models = (comparison or {}).get("models")  # older comparisons did not keep them
        compared = bool(models) and same_settings(models["a"], b1[1]["config"]["model"]) \
            and same_settings(models["b"], b2[1]["config"]["model"])
        separated = ""
        if compared:
            m = comparison["metrics"]["recall@20"]
            if m["interval95"][0] <= 0 <= m["interval95"][1]:
                separated = "; not separated: the interval holds a zero gap"
            users = f"{comparison['users']:,}".replace(",", " ")
            spread = (f"95 % interval over {users} users "
                      f"[{signed(m['interval95'][0])}, {signed(m['interval95'][1])}]")
            test = f"paired t {p_value(m['paired_t_p'])}, Wilcoxon " \
                   f"{p_value(m['wilcoxon_p'])}"
        elif comparison:
            spread = "not measured for these settings (the per-user record compares others)"
            test = "–"
        else:
            spread = "not measured (no per-user record of the pair)"
            test = "–"
        rows.append([
            "Which model of chapter 3's table (the linear family beside ItemKNN, iALS, MF-CCL and "
            "the most popular items) ranks best on Gowalla, each tuned on a 10 % validation "
            "split?",
            f"{l1} (test Recall@20 {number(r1, 4)}), then {l2} ({number(r2, 4)}), of the "
            f"{len(ranked)} of {len(CH3_FAMILIES)} models recorded{separated}",
            f"{signed(r1 - r2)} Recall@20",
            spread, seeds_of(context, (f1, f2)), test, "[table](#chapter-3-on-real-data)"])
    rows += ch4_directions(context)
    ease = selected(ch3_group(context, "ease"))
    published = context.published.get("gowalla", {}).get("ease")
    if ease and published:
        value = metric(ease[1], "test", "recall@20")
        rows.append([
            "Does EASE tuned on validation (and trained without the validation items) reach "
            "BARS' EASE, tuned on test?",
            "below it" if value < published["recall20"] else "at or above it",
            f"{signed(value - published['recall20'])} Recall@20",
            "–", "deterministic fit", "–", "[table](#chapter-3-on-real-data)"])
    if not rows:
        return "No finding yet: no records.\n"
    return markdown(["question", "answer", "effect", "spread", "seeds", "test", "table"], rows)


# ---------------------------------------------------------------------------------------------
# the build


def build_text(text: str, context: Context, where: str) -> str:
    def replace(match: re.Match) -> str:
        name = match.group("id")
        if name not in TABLES:
            raise SystemExit(f"{where}: unknown table {name!r}; known: {sorted(TABLES)}")
        return match.group(1) + TABLES[name](context) + match.group(4)

    return MARKER.sub(replace, text)


def heat_maps(context: Context, out: Path = FIGURES) -> list[Path]:
    """experiments/figures/ch3_<family>.png: validation Recall@20 over a two-parameter grid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    written = []
    for family, label in CH3_FAMILIES.items():
        group = ch3_group(context, family)
        keys = list(swept(group))
        if len(keys) != 2:
            continue
        rows_key, cols_key = keys
        rows, cols = swept(group)[rows_key], swept(group)[cols_key]
        values = np.full((len(rows), len(cols)), np.nan)
        for record in group.values():
            model = record["config"]["model"]
            values[rows.index(grid_value(model[rows_key])),
                   cols.index(grid_value(model[cols_key]))] = \
                metric(record, "valid", "recall@20")
        fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(cols), 1.0 + 0.6 * len(rows)))
        image = ax.imshow(values, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(cols)), [str(c) for c in cols])
        ax.set_yticks(range(len(rows)), [str(r) for r in rows])
        ax.set_xlabel(cols_key)
        ax.set_ylabel(rows_key)
        for i in range(len(rows)):
            for j in range(len(cols)):
                if np.isfinite(values[i, j]):
                    ax.text(j, i, f"{values[i, j]:.4f}", ha="center", va="center", fontsize=7,
                            color="white")
        ax.set_title(f"{label}: validation Recall@20 (Gowalla)", fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.8)
        fig.tight_layout()
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"ch3_{family}.png"
        fig.savefig(path, dpi=110, metadata={"Software": None})
        plt.close(fig)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a table differs from what the records give")
    parser.add_argument("--records", type=Path, default=RECORDS)
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(argv)
    context = Context(load_records(args.records), tomllib.loads(PUBLISHED.read_text()))
    pages = [args.readme, *PAGES[1:]] if args.readme != README else list(PAGES)
    differing = []
    for page in pages:
        text = page.read_text()
        built = build_text(text, context, str(page))
        if built == text:
            continue
        if args.check:
            changed = [m.group("id") for m, n in zip(MARKER.finditer(text),
                                                     MARKER.finditer(built), strict=True)
                       if m.group("body") != n.group("body")]
            differing.append(f"{page} differs from its records in table(s) {', '.join(changed)}")
        else:
            page.write_text(built)
    if args.check:
        if differing:
            print("build: " + "; ".join(differing) + "; run python experiments/build.py",
                  file=sys.stderr)
            return 1
        print(f"build: every table matches its {len(context.records)} records")
        return 0
    figures = heat_maps(context)
    print(f"build: {len(pages)} page(s) from {len(context.records)} records; "
          f"{len(figures)} figure(s) in {FIGURES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

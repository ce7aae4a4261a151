"""The studies of a report: every study.json below the searched directories, its tables (as the
study wrote them, each title naming the split it shows) and its figures (heat maps, spectral
profiles), copied into the report's figures directory so that the report stands alone."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from linrec.atomic import write_bytes_atomic
from linrec.report._format import relative_run, slug
from linrec.report.render import Table

#: under each study's heading: its tables are the study's own, on the split each title names
SPLIT_NOTE = ("The study's own tables: each title names the split it shows; `--split` does not "
              "change them.")


@dataclass
class StudyTables:
    """One study found below the searched directories."""

    name: str
    directory: Path
    markdown: str  # the heading, the note, every table's Markdown and the figure links
    tables: list[Table]
    figures: list[Path]  # copies in the report's figures directory (PNG and PDF)


def cell_text(text: str) -> str:
    """A CSV cell of a study table as its Markdown shows it (linrec.results.to_markdown):
    floats in 4 decimals (4 significant digits from 1e4 on), everything else as written."""
    try:
        int(text)
        return text
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return text
    return f"{value:.4f}" if abs(value) < 1e4 else f"{value:.4g}"


def study_table(md_path: Path) -> Table:
    """The Table of a study's <stem>.md (its `### ` title) and <stem>.csv (its cells; without
    a CSV, the cells of the Markdown table)."""
    lines = md_path.read_text().splitlines()
    title = lines[0].removeprefix("### ").strip() if lines and lines[0].startswith("### ") \
        else md_path.stem
    csv_path = md_path.with_suffix(".csv")
    if csv_path.is_file():
        rows = list(csv.reader(io.StringIO(csv_path.read_text())))
        rows[1:] = [[cell_text(c) for c in row] for row in rows[1:]]  # the header as written
    else:
        rows = [[c.strip() for c in line.strip().strip("|").split("|")]
                for line in lines if line.startswith("|") and not line.startswith("|---")]
    return Table(title, rows[0] if rows else [], rows[1:])


def read_studies(dirs: Sequence[Path], figures_dir: Path | None) -> list[StudyTables]:
    """Every study below `dirs`, sorted by path; its figures are copied into figures_dir
    (none when figures_dir is None)."""
    from linrec.results import find_studies, read_results

    out = []
    for study_file in find_studies(dirs):
        index = read_results(study_file)
        directory = study_file.parent
        name = str(index["study"]["name"])
        md = f"## Study {name} ({directory})\n\n{SPLIT_NOTE}\n"
        tables = []
        for table in index.get("tables", []):
            md += "\n" + (directory / table).read_text()
            tables.append(study_table(directory / table))
        figures: list[Path] = []
        if figures_dir is not None:
            where = relative_run(str(directory), dirs)
            prefix = f"study_{slug(name)}" + ("" if where == "." else f"_{slug(where)}")
            for figure in index.get("figures", []):
                for source in (directory / figure, (directory / figure).with_suffix(".pdf")):
                    if source.is_file():
                        target = figures_dir / f"{prefix}_{source.name}"
                        figures.append(write_bytes_atomic(target, source.read_bytes()))
            md += "".join(f"\n![{p.stem}](figures/{p.name})\n" for p in figures
                          if p.suffix == ".png")
        out.append(StudyTables(name, directory, md, tables, figures))
    return out

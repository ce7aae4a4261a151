"""The studies of a report: every study.json below the searched directories, its tables (as the
study wrote them, each title naming the split it shows) and its figures (heat maps, spectral
profiles), copied into the report's figures directory so that the report stands alone."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from linrec.atomic import write_bytes_atomic
from linrec.report._format import relative_run, slug
from linrec.report.render import Table, markdown

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


def _number(text: str) -> int | float | str:
    """A CSV cell back as the number it was written as (text stays text)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def study_table(md_path: Path) -> Table:
    """The table a study wrote beside <stem>.md: <stem>.json, the table as it was built; for a
    study written without one (older linrec), its <stem>.csv, titled by the stem."""
    json_path = md_path.with_suffix(".json")
    if json_path.is_file():
        return Table.from_json(json.loads(json_path.read_text()))
    rows = list(csv.reader(io.StringIO(md_path.with_suffix(".csv").read_text())))
    return Table(md_path.stem, rows[0] if rows else [],
                 [[_number(c) if c else None for c in row] for row in rows[1:]])


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
            tables.append(study_table(directory / table))
            md += "\n" + markdown(tables[-1])
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

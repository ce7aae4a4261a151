"""linrec.report.studies: a study's tables as it wrote them (title, cells formatted as its
Markdown), the split note, and its figures copied beside the report."""

from __future__ import annotations

import json

from linrec.report.studies import SPLIT_NOTE, cell_text, read_studies, study_table
from linrec.results import to_csv, to_markdown


def test_cells_read_as_the_markdown_shows_them():
    rows = [{"k": 5, "x": 0.123456, "big": 123456.7, "s": "12.34±0.56", "n": None,
             "nan": float("nan"), "flag": True}]
    md = to_markdown(list(rows[0]), rows).splitlines()[2]
    written = to_csv(list(rows[0]), rows).splitlines()[1].split(",")
    assert "| " + " | ".join(cell_text(c) for c in written) + " |" == md


def _study(root, name="loss_study"):
    (root / "tables").mkdir(parents=True)
    (root / "figures").mkdir()
    (root / "tables" / "t.md").write_text("### Losses, test split\n\n| a | b |\n|---|---|\n"
                                          "| x | 0.5000 |\n")
    (root / "tables" / "t.csv").write_text("a,b\nx,0.5\n")
    (root / "figures" / "grid.png").write_bytes(b"png bytes")
    (root / "figures" / "grid.pdf").write_bytes(b"pdf bytes")
    (root / "study.json").write_text(json.dumps({
        "study": {"name": name}, "tables": ["tables/t.md"], "figures": ["figures/grid.png"]}))


def test_a_study_with_its_tables_note_and_copied_figures(tmp_path):
    _study(tmp_path / "runs" / "seed=0")
    table = study_table(tmp_path / "runs" / "seed=0" / "tables" / "t.md")
    assert (table.title, table.columns, table.rows) == ("Losses, test split", ["a", "b"],
                                                        [["x", "0.5000"]])
    (study,) = read_studies([tmp_path], tmp_path / "report" / "figures")
    assert study.name == "loss_study" and study.tables[0].title == "Losses, test split"
    assert SPLIT_NOTE in study.markdown and "| x | 0.5000 |" in study.markdown
    names = sorted(p.name for p in study.figures)
    assert names == [f"study_loss_study_runs_seed_0_grid.{ext}" for ext in ("pdf", "png")]
    assert (tmp_path / "report" / "figures" / names[1]).read_bytes() == b"png bytes"
    assert f"![study_loss_study_runs_seed_0_grid](figures/{names[1]})" in study.markdown
    (bare,) = read_studies([tmp_path / "runs" / "seed=0"], None)
    assert bare.figures == [] and "figures/" not in bare.markdown
    # a table written without its CSV: the Markdown's cells
    (tmp_path / "runs" / "seed=0" / "tables" / "t.csv").unlink()
    assert study_table(tmp_path / "runs" / "seed=0" / "tables" / "t.md").rows == [["x", "0.5000"]]

"""linrec.report.studies: a study's tables read back as the study built them (title, cells,
numbers), the split note, and its figures copied beside the report; and the one number
formatter every table uses."""

from __future__ import annotations

import json
import math

from linrec.report._format import format_number
from linrec.report.render import Num, Table, csv_text, markdown
from linrec.report.studies import SPLIT_NOTE, read_studies, study_table
from linrec.studies.common import write_table


def test_the_one_number_formatter():
    assert [format_number(v) for v in (5, 0.123456, 123456.7, None, float("nan"), "a±b", True)] \
        == ["5", "0.1235", "1.235e+05", "", "", "a±b", "True"]
    assert format_number(0.000123, setting=True) == "0.000123"
    assert Num(0.123456, std=0.01).text() == "0.1235" and Num(None).text() == ""


def test_a_table_is_stored_as_data_and_read_back_as_built(tmp_path):
    rows = [{"k": 5, "x": 0.123456, "big": 123456.7, "s": "12.34±0.56", "n": None,
             "nan": float("nan"), "flag": True}]
    md = write_table(tmp_path, "t", list(rows[0]), rows, title="A title")
    table = study_table(tmp_path / "t.md")
    assert table.title == "A title" and table.columns == list(rows[0])
    (row,) = table.rows
    assert row[:5] == [5, 0.123456, 123456.7, "12.34±0.56", None] and math.isnan(row[5])
    assert row[6] is True
    assert markdown(table) == md == (tmp_path / "t.md").read_text()
    assert "| 5 | 0.1235 | 1.235e+05 | 12.34±0.56 |  |  | True |" in md
    written = (tmp_path / "t.csv").read_bytes().decode()
    assert written == csv_text(table)
    assert written.splitlines()[1] == "5,0.123456,123456.7,12.34±0.56,,nan,True"
    num = Table("n", ["m"], [[Num(0.5, std=0.1, bold=True, marks="*")]])
    assert Table.from_json(json.loads(json.dumps(num.to_json()))) == num


def _study(root, name="loss_study"):
    (root / "tables").mkdir(parents=True)
    (root / "figures").mkdir()
    write_table(root / "tables", "t", ["a", "b"], [{"a": "x", "b": 0.5}],
                title="Losses, test split")
    (root / "figures" / "grid.png").write_bytes(b"png bytes")
    (root / "figures" / "grid.pdf").write_bytes(b"pdf bytes")
    (root / "study.json").write_text(json.dumps({
        "study": {"name": name}, "tables": ["tables/t.md"], "figures": ["figures/grid.png"]}))


def test_a_study_with_its_tables_note_and_copied_figures(tmp_path):
    _study(tmp_path / "runs" / "seed=0")
    table = study_table(tmp_path / "runs" / "seed=0" / "tables" / "t.md")
    assert (table.title, table.columns, table.rows) == ("Losses, test split", ["a", "b"],
                                                        [["x", 0.5]])
    (study,) = read_studies([tmp_path], tmp_path / "report" / "figures")
    assert study.name == "loss_study" and study.tables[0].title == "Losses, test split"
    assert SPLIT_NOTE in study.markdown and "| x | 0.5000 |" in study.markdown
    names = sorted(p.name for p in study.figures)
    assert names == [f"study_loss_study_runs_seed_0_grid.{ext}" for ext in ("pdf", "png")]
    assert (tmp_path / "report" / "figures" / names[1]).read_bytes() == b"png bytes"
    assert f"![study_loss_study_runs_seed_0_grid](figures/{names[1]})" in study.markdown
    (bare,) = read_studies([tmp_path / "runs" / "seed=0"], None)
    assert bare.figures == [] and "figures/" not in bare.markdown


def test_a_study_written_without_table_data_is_read_from_its_csv(tmp_path):
    """Studies of older linrec versions wrote no <stem>.json: the CSV's cells, as numbers."""
    _study(tmp_path)
    (tmp_path / "tables" / "t.json").unlink()
    table = study_table(tmp_path / "tables" / "t.md")
    assert (table.title, table.columns, table.rows) == ("t", ["a", "b"], [["x", 0.5]])
    assert "| x | 0.5000 |" in markdown(table)

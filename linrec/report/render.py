"""Tables of a report in Markdown, CSV, LaTeX (booktabs) and one self-contained HTML page.

A table is a title, column names and rows of cells; a cell is text or a `Num` (a mean with an
optional ± std, bold when best, followed by significance markers). Each format renders the same
table: Markdown `**0.1234** ± 0.0010*`, LaTeX `\\textbf{0.1234} $\\pm$ 0.0010$^{*}$`, HTML
`<b>…</b>`; CSV keeps plain numbers (mean and std in two columns).
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from linrec.report._format import format_number


@dataclass(frozen=True)
class Num:
    """A number cell: value, optional std, bold (best in its column), significance marks."""

    value: float | None
    std: float | None = None
    bold: bool = False
    marks: str = ""
    digits: int = 4

    def text(self) -> str:
        return format_number(None if self.value is None else float(self.value), self.digits)

    def std_text(self) -> str:
        return format_number(None if self.std is None else float(self.std), self.digits)


@dataclass
class Table:
    """A titled table; `notes` are printed under it (legend, protocol, problems). Cells are
    text, numbers (printed by `format_number`) or `Num`. A table is stored as data
    (`to_json`, `from_json`): a study writes its tables so, and the report reads them back as
    they were built."""

    title: str
    columns: list[str]
    rows: list[list[Any]]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        def cell(value: Any) -> Any:
            if isinstance(value, Num):
                return {"num": {k: getattr(value, k) for k in
                                ("value", "std", "bold", "marks", "digits")}}
            if isinstance(value, float) and not math.isfinite(value):
                return {"float": str(value)}  # JSON has no NaN or infinity
            return value.item() if hasattr(value, "item") else value

        return {"title": self.title, "columns": list(self.columns),
                "rows": [[cell(c) for c in row] for row in self.rows], "notes": self.notes}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Table:
        def cell(value: Any) -> Any:
            if isinstance(value, dict) and "num" in value:
                return Num(**value["num"])
            if isinstance(value, dict) and "float" in value:
                return float(value["float"])
            return value

        return cls(data["title"], list(data["columns"]),
                   [[cell(c) for c in row] for row in data["rows"]], list(data.get("notes", [])))


def cell_text(cell: Any) -> str:
    """A plain cell's text (None empty, numbers by `format_number`)."""
    return format_number(cell) if isinstance(cell, (int, float)) and not isinstance(cell, bool) \
        else ("" if cell is None else str(cell))


def _cell_md(cell: Any) -> str:
    if isinstance(cell, Num):
        text = cell.text()
        if not text:
            return ""
        text = f"**{text}**" if cell.bold else text
        std = cell.std_text()
        return text + (f" ± {std}" if std else "") + cell.marks.replace("*", "\\*")
    return cell_text(cell).replace("|", "\\|")


def markdown(table: Table) -> str:
    lines = [f"### {table.title}", "", "| " + " | ".join(table.columns) + " |",
             "|" + "|".join("---" for _ in table.columns) + "|"]
    lines += ["| " + " | ".join(_cell_md(c) for c in row) + " |" for row in table.rows]
    if table.notes:
        lines += [""] + [f"{note}  " for note in table.notes]
    return "\n".join(lines) + "\n"


_LATEX_ESCAPES = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
                  "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "\\": r"\textbackslash{}", "±": r"$\pm$", "†": r"$^{\dagger}$",
                  "‡": r"$^{\ddagger}$", "λ": r"$\lambda$", "τ": r"$\tau$", "Δ": r"$\Delta$",
                  "−": r"$-$", "<": r"$<$", ">": r"$>$"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in str(text))


def _cell_tex(cell: Any) -> str:
    if isinstance(cell, Num):
        text = cell.text()
        if not text:
            return ""
        text = rf"\textbf{{{text}}}" if cell.bold else text
        std = cell.std_text()
        marks = cell.marks.replace("†", r"\dagger").replace("‡", r"\ddagger")
        return text + (rf" $\pm$ {std}" if std else "") + (f"$^{{{marks}}}$" if marks else "")
    return latex_escape(cell_text(cell))


def latex(table: Table) -> str:
    """A booktabs table (needs \\usepackage{booktabs}); the first column left-aligned."""
    spec = "l" + "r" * (len(table.columns) - 1)
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{latex_escape(table.title)}}}",
             rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(latex_escape(c) for c in table.columns) + r" \\", r"\midrule"]
    lines += [" & ".join(_cell_tex(c) for c in row) + r" \\" for row in table.rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    if table.notes:
        lines += [r"\par\smallskip\footnotesize " + latex_escape(" ".join(table.notes))]
    lines += [r"\end{table}"]
    return "\n".join(lines) + "\n"


def csv_text(table: Table) -> str:
    """The table as CSV: a Num becomes its value (and `<column> std` when it has one)."""
    import csv
    import io

    has_std = [any(isinstance(r[i], Num) and r[i].std_text() for r in table.rows)
               for i in range(len(table.columns))]
    header = []
    for name, std in zip(table.columns, has_std, strict=True):
        header += [name, f"{name} std"] if std else [name]
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    for row in table.rows:
        out = []
        for cell, std in zip(row, has_std, strict=True):
            if isinstance(cell, Num):
                out.append(cell.text())
                if std:
                    out.append(cell.std_text())
            else:
                out.append("" if cell is None else cell)
        writer.writerow(out)
    return buf.getvalue()


def _cell_html(cell: Any) -> str:
    if isinstance(cell, Num):
        text = cell.text()
        if not text:
            return ""
        text = f"<b>{text}</b>" if cell.bold else text
        std = cell.std_text()
        return text + (f" ± {std}" if std else "") + (f"<sup>{html.escape(cell.marks)}</sup>"
                                                      if cell.marks else "")
    return html.escape(cell_text(cell))


def html_table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell_html(c)}</td>" for c in row) + "</tr>"
                   for row in table.rows)
    notes = "".join(f"<p class='note'>{html.escape(n)}</p>" for n in table.notes)
    return (f"<h3>{html.escape(table.title)}</h3><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>{notes}")


@dataclass
class Section:
    """A part of the HTML page: a heading, an optional paragraph, tables and PNG figures."""

    heading: str
    tables: Sequence[Table]
    figures: Sequence[Path] = ()
    intro: str = ""


def html_page(title: str, sections: Sequence[Section]) -> str:
    """One self-contained page: per section its tables and its PNG figures (embedded as data
    URIs, so the page needs no other file)."""
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;margin:.5em 0 1em}"
             "th,td{border-bottom:1px solid #ccc;padding:.2em .6em;text-align:right}"
             "th:first-child,td:first-child{text-align:left}.note{color:#555;font-size:90%}"
             "img{max-width:100%;margin:.5em 0}")
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
             f"</title><style>{style}</style></head><body><h1>{html.escape(title)}</h1>"]
    for section in sections:
        parts.append(f"<h2>{html.escape(section.heading)}</h2>")
        if section.intro:
            parts.append(f"<p class='note'>{html.escape(section.intro)}</p>")
        parts += [html_table(t) for t in section.tables]
        for figure in (Path(f) for f in section.figures if Path(f).suffix == ".png"):
            data = base64.b64encode(figure.read_bytes()).decode()
            parts.append(f"<figure><img alt='{html.escape(figure.stem)}' "
                         f"src='data:image/png;base64,{data}'><figcaption>"
                         f"{html.escape(figure.stem)}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts)

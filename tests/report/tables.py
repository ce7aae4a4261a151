"""Read the report's tables back from each written format, independently of
linrec.report.render: every format becomes a list of (title, columns, rows) in the order
written, a cell being a `Cell` (its number text, std text and boldness; marks dropped), so that
the tests can compare the formats with each other and with the runs."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from html.parser import HTMLParser


@dataclass(frozen=True)
class Cell:
    text: str  # the value as printed ("0.1234", "ease", "")
    std: str = ""
    bold: bool = False


Tables = list[tuple[str, list[str], list[list[Cell]]]]
_MARKS = "*†‡"


def _num(text: str, bold: bool) -> Cell:
    value, _, std = text.partition(" ± ")
    return Cell(value.strip(), std.strip().rstrip(_MARKS).strip(), bold)


def _md_cell(text: str) -> Cell:
    text = text.strip().replace("\\*", "*").replace("\\|", "|")
    bold = text.startswith("**")
    text = text.replace("**", "")
    if " ± " in text:
        return _num(text, bold)
    return Cell(text.rstrip(_MARKS) if re.fullmatch(r"-?[\d.]+[*†‡]*", text) else text, "", bold)


def markdown_tables(text: str) -> Tables:
    """Every `### title` followed by a pipe table."""
    out: Tables = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("### ") or i + 3 > len(lines) or not lines[i + 2].startswith("|"):
            continue
        header = [c.strip() for c in re.split(r"(?<!\\)\|", lines[i + 2])[1:-1]]
        rows = []
        for row in lines[i + 4:]:
            if not row.startswith("|"):
                break
            rows.append([_md_cell(c) for c in re.split(r"(?<!\\)\|", row)[1:-1]])
        out.append((line[4:].strip(), header, rows))
    return out


def csv_tables(text: str, titles: list[str]) -> Tables:
    """The tables of a CSV file that holds several (separated by a blank line), named by
    `titles` in order; a `<column> std` column becomes the std of `<column>`."""
    blocks = [b for b in re.split(r"\r?\n\s*\r?\n", text.strip()) if b.strip()]
    assert len(blocks) == len(titles), (len(blocks), titles)
    out: Tables = []
    for title, block in zip(titles, blocks, strict=True):
        rows = list(csv.reader(io.StringIO(block)))
        header = rows[0]
        columns = [c for c in header if not (c.endswith(" std") and c[:-4] in header)]
        cells = []
        for row in rows[1:]:
            by_name = dict(zip(header, row, strict=True))
            cells.append([Cell(by_name[c], by_name.get(f"{c} std", "")) for c in columns])
        out.append((title, columns, cells))
    return out


def _tex_unescape(text: str) -> str:
    for tex, plain in ((r"\textasciitilde{}", "~"), (r"\textasciicircum{}", "^"),
                       (r"\textbackslash{}", "\\"), (r"$\lambda$", "λ"), (r"$\tau$", "τ"),
                       (r"$\Delta$", "Δ"), (r"$-$", "−"),
                       (r"$<$", "<"), (r"$>$", ">"), (r"$^{\dagger}$", "†"),
                       (r"$^{\ddagger}$", "‡"), (r"$\pm$", "±")):
        text = text.replace(tex, plain)
    return re.sub(r"\\([&%$#_{}])", r"\1", text)


def _tex_cell(text: str) -> Cell:
    text = re.sub(r"\$\^\{[^}]*\}\$$", "", text.strip())  # significance marks
    bold = text.startswith(r"\textbf{")
    text = re.sub(r"\\textbf\{([^}]*)\}", r"\1", text)
    if r" $\pm$ " in text:
        value, _, std = text.partition(r" $\pm$ ")
        return Cell(value.strip(), std.strip(), bold)
    return Cell(_tex_unescape(text), "", bold)


def latex_tables(text: str) -> Tables:
    """Every \\caption{title} + tabular of a .tex file."""
    out: Tables = []
    for caption, body in re.findall(r"\\caption\{(.*?)\}\n\\begin\{tabular\}\{[lr]+\}\n"
                                    r"(.*?)\\end\{tabular\}", text, flags=re.S):
        lines = [line.removesuffix(r" \\") for line in body.splitlines()
                 if line not in (r"\toprule", r"\midrule", r"\bottomrule")]
        split = [re.split(r"(?<!\\)&", line) for line in lines]
        header = [_tex_unescape(c.strip()) for c in split[0]]
        out.append((_tex_unescape(caption), header,
                    [[_tex_cell(c) for c in row] for row in split[1:]]))
    return out


class _HTMLTables(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: Tables = []
        self.title: str | None = None
        self.text: str | None = None
        self.row: list[Cell] | None = None
        self.header: list[str] = []
        self.rows: list[list[Cell]] = []
        self.bold = False
        self.in_sup = False

    def handle_starttag(self, tag, attrs):
        if tag in ("h3", "th", "td"):
            self.text, self.bold = "", False
        elif tag == "tr":
            self.row = []
        elif tag == "b":
            self.bold = True
        elif tag == "sup":
            self.in_sup = True
        elif tag == "table":
            self.header, self.rows = [], []

    def handle_endtag(self, tag):
        if tag == "h3":
            self.title = self.text
        elif tag == "th":
            self.header.append(self.text)
        elif tag == "td":
            text = self.text
            self.row.append(_num(text, self.bold) if " ± " in text or self.bold
                            else Cell(text, "", False))
        elif tag == "tr" and self.row:
            self.rows.append(self.row)
        elif tag == "sup":
            self.in_sup = False
        elif tag == "table":
            self.tables.append((self.title, self.header, self.rows))
        if tag in ("h3", "th", "td"):
            self.text = None

    def handle_data(self, data):
        if self.text is not None and not self.in_sup:
            self.text += data


def html_tables(text: str) -> Tables:
    """Every <h3>title</h3><table> of the page."""
    parser = _HTMLTables()
    parser.feed(text)
    return parser.tables

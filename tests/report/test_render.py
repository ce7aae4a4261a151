"""linrec.report.render: one table in Markdown, CSV, LaTeX (booktabs) and HTML, each read back
with an independent parser (tests/report/tables.py) to the same cells; escapes; the page is
self-contained (figures as data URIs)."""

from __future__ import annotations

import base64

from linrec.report.render import Num, Section, Table, csv_text, html_page, latex, markdown
from tests.report.expected import same_tables
from tests.report.tables import Cell, csv_tables, html_tables, latex_tables, markdown_tables

TABLE = Table("A & B: λ_1 <5%>", ["model", "ndcg@10", "fit s"],
              [["x_1", Num(0.5, 0.01, bold=True, marks="*†"), Num(1.234, digits=2)],
               ["y", Num(float("nan")), Num(None)],
               ["z|w", Num(0.25, float("nan"), marks="*‡"), Num(0.0, digits=2)]],
              ["p < 0.05", "second note"])
CELLS = [[Cell("x_1"), Cell("0.5000", "0.0100", True), Cell("1.23")],
         [Cell("y"), Cell(""), Cell("")],
         [Cell("z|w"), Cell("0.2500"), Cell("0.00")]]


def test_formats_render_bold_std_marks_and_escapes():
    md = markdown(TABLE)
    assert md.startswith("### A & B: λ_1 <5%>\n")
    assert "| x_1 | **0.5000** ± 0.0100\\*† | 1.23 |" in md and "| y |  |  |" in md
    assert "| z\\|w | 0.2500\\*‡ | 0.00 |" in md and "p < 0.05  \nsecond note  " in md
    tex = latex(TABLE)
    assert r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex
    assert r"\begin{tabular}{lrr}" in tex
    assert r"\textbf{0.5000} $\pm$ 0.0100$^{*\dagger}$" in tex
    assert r"0.2500$^{*\ddagger}$" in tex
    assert r"\caption{A \& B: $\lambda$\_1 $<$5\%$>$}" in tex and r"x\_1" in tex
    assert r"p $<$ 0.05 second note" in tex
    text = csv_text(TABLE)
    assert text.splitlines()[0] == "model,ndcg@10,ndcg@10 std,fit s"
    assert text.splitlines()[1] == "x_1,0.5000,0.0100,1.23"
    page = html_page("t", [Section("s", [TABLE])])
    assert "<td><b>0.5000</b> ± 0.0100<sup>*†</sup></td>" in page
    assert "<td>0.2500<sup>*‡</sup></td>" in page
    assert "<h3>A &amp; B: λ_1 &lt;5%&gt;</h3>" in page


def test_every_format_reads_back_to_the_same_cells():
    title = TABLE.title
    expected = [(title, TABLE.columns, CELLS)]
    assert markdown_tables(markdown(TABLE)) == expected
    same_tables(expected, latex_tables(latex(TABLE)), "tex")
    same_tables(expected, csv_tables(csv_text(TABLE), [title]), "csv")
    same_tables(expected, html_tables(html_page("t", [Section("s", [TABLE])])), "html")


def test_the_page_embeds_png_figures_and_the_section_intro(tmp_path):
    png = tmp_path / "figure.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    pdf = tmp_path / "figure.pdf"
    pdf.write_bytes(b"%PDF-1.4")
    page = html_page("report <1>", [Section("first", [TABLE], [png, pdf], intro="a & b"),
                                    Section("second", [])])
    assert "<title>report &lt;1&gt;</title>" in page and "<h2>second</h2>" in page
    assert "<p class='note'>a &amp; b</p>" in page
    data = base64.b64encode(png.read_bytes()).decode()
    assert page.count("data:image/png;base64,") == 1 and data in page  # the PDF is not shown
    assert "src='figure" not in page and "href=" not in page  # no file outside the page

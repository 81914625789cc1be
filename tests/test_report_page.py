"""pdelab.report.page and pdelab.report.table_file: a report table's page, rendered from the
same DataFrames and prose as its Markdown and LaTeX (nothing parsed back from a written file),
and a prose document's page through the markdown package. tests/test_workflow.py opens the
pages of a built report in Chromium."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from pdelab.report.page import markdown_html, page_of, write_markdown
from pdelab.report.profiles import NO_PROFILE
from pdelab.report.table_file import Grid, Note, TableFile, csv_of
from pdelab.report.tables import frame_table, further_table


class Tables(HTMLParser):
    """The cells of every <table> of a page, row by row, the alignment and class of each body
    cell, and the page's tag balance."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.styles: list[tuple[str, str]] = []  # (style, class) of each <td>, in order
        self.open: list[str] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag not in ("meta", "br"):
            self.open.append(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []
            if tag == "td":
                given = dict(attrs)
                self.styles.append((given.get("style") or "", given.get("class") or ""))

    def handle_endtag(self, tag: str) -> None:
        assert self.open.pop() == tag, f"</{tag}> closes another element"
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self.cell or []).strip())
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def parsed(text: str) -> Tables:
    tables = Tables()
    tables.feed(text)
    assert tables.open == [], f"unclosed: {tables.open}"
    return tables


FRAME = pd.DataFrame(
    {"variant": ["baseline", "after_ln"], "acc": [0.5, 0.75], "note": ["n/a", "<b> & co"]}
)


def test_a_table_file_writes_its_page_with_every_cell_and_note(tmp_path: Path) -> None:
    md, tex = tmp_path / "tables/study.md", tmp_path / "tables/study.tex"
    md.parent.mkdir()
    table = frame_table(FRAME, "A study", "Accuracy of **ours**; `variant` names the model.")
    # what the study step adds before anything is written: a list, a note, a second table
    table.add("- **listops** is a stand-in.", Note("Same run: a = b"))
    table.add(*further_table(FRAME, "Again", "again"))
    page = table.write(md, tex, "smoke")
    assert page == page_of(md) == tmp_path / "tables/study.html"
    text = page.read_text()
    tables = parsed(text).tables
    assert len(tables) == 2 and tables[0][0] == tables[1][0]  # the second as written (no parse)
    assert tables[0] == [
        ["variant", "acc", "note"],
        ["baseline", "0.5000", "n/a"],
        ["after_ln", "0.7500", "<b> & co"],  # escaped, shown as written
    ]
    assert "Made by the smoke profile: a small CPU run" in text
    assert "<strong>A study</strong>" in text and "<strong>ours</strong>" in text
    assert "<code>variant</code>" in text and "<p>Same run: a = b.</p>" in text
    assert "<li><strong>listops</strong> is a stand-in.</li>" in text
    assert "<b> & co" not in text and "after_ln" in text  # underscores stay literal
    assert "<script" not in text and "http" not in text  # self-contained
    # the Markdown, LaTeX and CSV of the same parts, written in the same call
    again = Grid(FRAME, numparse=False).markdown()
    assert md.read_text().endswith(f"Same run: a = b.\n\nAgain:\n\n{again}\n")
    latex = tex.read_text()
    assert latex.count("\\begin{table}") == 2 and "\\label{tab:study-again}" in latex
    assert latex.index("Same run: a = b.") < latex.index("\\end{table}")  # in the first float
    # the CSV is tidy numbers (pdelab.report.tidy), never the shown frame: a study's comes from
    # its runs in the study step, so a table file with no data writes none
    assert not csv_of(md).exists()


def test_numbers_are_right_aligned_and_words_are_not() -> None:
    frame = pd.DataFrame(
        {
            "a": ["+3.25", "−"],
            "b": ["5.54%", "1e-05"],
            "c": ["x0.48", "n/a"],
            "d": [1.5, float("nan")],
            "e": ["n/a", "n/a"],
        }
    )
    tables = parsed(Grid(frame, numparse=False).html())
    right = "text-align: right;"
    assert [style for style, _ in tables.styles[:5]] == ["", right, "", right, ""]
    assert tables.tables[0][2] == ["−", "1e-05", "n/a", "n/a", "n/a"]  # NaN reads n/a


def test_html_cells_hold_their_text_without_the_text_tables_padding() -> None:
    """A browser's textContent reads a cell as written: tabulate's column padding is gone."""
    cells = re.findall(r"<t[hd](?: [^>]*)?>(.*?)</t[hd]>", Grid(FRAME).html(), re.S)
    assert cells[:3] == ["variant", "acc", "note"] and "after_ln" in cells
    assert all(c == c.strip() for c in cells), cells


def test_a_long_cell_wraps_and_a_missing_gain_reads_its_word() -> None:
    sentence = "a finding written out as a sentence, longer than a cell should be"
    html = Grid(pd.DataFrame({"claim": [sentence]})).html()
    assert f"<div class='long'>{sentence}</div>" in html
    gains = Grid(pd.DataFrame({"task": ["t"], "paper Δ": [float("nan")]}), floatfmt="+.2f")
    assert "nan" not in gains.html() and "nan" not in gains.markdown()
    assert "n/a" in gains.latex() and "—" in Grid(gains.frame, missing="—").markdown()


def test_prose_headings_paragraphs_and_a_table() -> None:
    html = markdown_html(
        "# Title\n\nOne line\nand its next.\n\n| a |\n|---|\n| 1 |\n\n## Part\ntext"
    )
    lines = html.split("\n")
    assert lines[:3] == ["<h1>Title</h1>", "<p>One line", "and its next.</p>"]
    assert '<h2 id="part">Part</h2>' in lines and "<p>text</p>" in lines
    assert '<div class="scroll"><table>' in html  # scrolls rather than cut off
    tables = parsed(html)
    assert tables.tables == [[["a"], ["1"]]] and tables.styles == [("", "num")]


def test_raw_html_in_prose_is_shown_as_written() -> None:
    html = markdown_html("A note <script>alert(1)</script> & <b>bold</b>")
    assert "<script" not in html and "&lt;script&gt;" in html and "<b>" not in html


def test_a_table_made_without_training_names_no_profile(tmp_path: Path) -> None:
    grid = Grid(pd.DataFrame({"check": ["row sums"], "value": [1]}))
    table = TableFile(["**Checks**", grid])
    assert NO_PROFILE in table.write(tmp_path / "theory.md", None, None).read_text()
    assert (
        "Made by the paper_xl profile."
        in table.write(tmp_path / "t.md", None, "paper_xl").read_text()
    )
    assert not (tmp_path / "theory.tex").exists() and not csv_of(tmp_path / "t.md").exists()


def test_a_document_page_is_written_beside_its_markdown_only(tmp_path: Path) -> None:
    page = write_markdown(tmp_path / "claims.md", "## Claims\n\ntext\n", "smoke")
    assert page == tmp_path / "claims.html" and (tmp_path / "claims.md").read_text() == (
        "## Claims\n\ntext\n"
    )
    assert '<h2 id="claims">Claims</h2>' in page.read_text()
    with pytest.raises(ValueError, match=r"claims.csv: a page is written beside a Markdown"):
        write_markdown(tmp_path / "claims.csv", "a,b\n1,2\n", "smoke")


def test_an_escaped_pipe_stays_inside_its_cell() -> None:
    """Claims tables write norms as \\|\\|S\\|\\|: one cell, shown with its pipes."""
    text = markdown_html("| claim | we find |\n|---|---|\n| norm | \\|\\|S\\|\\|_2 <= 1 |\n")
    assert text.count("<td") == 2 and "||S||_2 &lt;= 1" in text

"""pdelab.report.page: a report table's Markdown as the HTML page Snakemake's report shows
inline. tests/test_workflow.py opens the pages of a built report in Chromium."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from pdelab.report.page import NO_PROFILE, body_html, page_of, write_page
from pdelab.report.tables import tabulated, write_frame


class Tables(HTMLParser):
    """The cells of every <table> of a page, row by row, and the page's tag balance."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
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

    def handle_endtag(self, tag: str) -> None:
        assert self.open.pop() == tag, f"</{tag}> closes another element"
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self.cell or []))
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def parsed(text: str) -> Tables:
    tables = Tables()
    tables.feed(text)
    assert tables.open == [], f"unclosed: {tables.open}"
    return tables


def test_a_written_table_becomes_its_page_with_every_cell(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {"variant": ["baseline", "after_ln"], "acc": [0.5, 0.75], "note": ["n/a", "<b> & co"]}
    )
    md, tex = tmp_path / "tables/study.md", tmp_path / "tables/study.tex"
    md.parent.mkdir()
    write_frame(frame, "A study", "Accuracy of **ours**; `variant` names the model.", md, tex)
    with md.open("a") as f:  # what the study step appends: a note and a second table
        f.write("\n- **listops** is a stand-in.\n\n" + tabulated(frame, "pipe") + "\n")
    page = write_page(md, "smoke")
    assert page == page_of(md) == tmp_path / "tables/study.html"
    text = page.read_text()
    tables = parsed(text).tables
    assert len(tables) == 2 and tables[0] == tables[1]
    assert tables[0] == [
        ["variant", "acc", "note"],
        ["baseline", "0.5000", "n/a"],
        ["after_ln", "0.7500", "<b> & co"],  # escaped, shown as written
    ]
    assert "Made by the smoke profile: a small CPU run" in text
    assert "<strong>A study</strong>" in text and "<strong>ours</strong>" in text
    assert "<code>variant</code>" in text
    assert "<li><strong>listops</strong> is a stand-in.</li>" in text
    assert "<b> & co" not in text and "after_ln" in text  # underscores stay literal
    assert "<script" not in text and "http" not in text  # self-contained


def test_numbers_are_right_aligned_and_words_are_not() -> None:
    html = body_html("| a | b | c |\n|---|:--|--:|\n| +3.25 | 5.54% | x0.48 |\n| − | 1e-05 | n/a |")
    cells = re.findall(r"<td( class='num')?>([^<]*)</td>", html)
    assert cells == [
        (" class='num'", "+3.25"),
        (" class='num'", "5.54%"),
        ("", "x0.48"),
        ("", "−"),
        (" class='num'", "1e-05"),
        ("", "n/a"),
    ]


def test_headings_paragraphs_and_a_table_right_after_text() -> None:
    html = body_html("# Title\n\nOne line\nand its next.\n| a |\n|---|\n| 1 |\n## Part\ntext")
    assert html.split("\n") == [
        "<h1>Title</h1>",
        "<p>One line and its next.</p>",
        html.split("\n")[2],
        "<h2>Part</h2>",
        "<p>text</p>",
    ]
    assert parsed(html).tables == [[["a"], ["1"]]]


def test_a_table_made_without_training_names_no_profile(tmp_path: Path) -> None:
    md = tmp_path / "theory.md"
    md.write_text("**Checks**\n\n| check | value |\n|---|---|\n| row sums | 1 |\n")
    assert NO_PROFILE in write_page(md, None).read_text()
    assert "Made by the paper_xl profile." in write_page(md, "paper_xl").read_text()


def test_only_markdown_is_rendered(tmp_path: Path) -> None:
    csv = tmp_path / "claims.csv"
    csv.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=r"claims.csv: a table's page is rendered from its Mark"):
        write_page(csv, "smoke")


def test_an_escaped_pipe_stays_inside_its_cell() -> None:
    """Claims tables write norms as \\|\\|S\\|\\|: one cell, shown with its pipes."""
    text = body_html("| claim | we find |\n|---|---|\n| norm | \\|\\|S\\|\\|_2 <= 1 |\n")
    assert text.count("<td") == 2 and "||S||_2 &lt;= 1" in text

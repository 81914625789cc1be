"""One table file of the report, built whole before anything is written: its Markdown, its
paste-ready LaTeX, its HTML page and the CSV of its numbers all come from the same parts.

The parts, in order: prose (Markdown text: a title, a caption, a list; not in the LaTeX, whose
floats carry the captions), :class:`Grid` s (a DataFrame and how its cells are formatted; with a
caption, a LaTeX float of its own) and :class:`Note` s (a sentence under the table: a paragraph,
and in LaTeX a footnote inside the first float). A study step adds its notes to the parts
before the files are written, so no file is reopened to append to, and none is parsed back:
tabulate renders each grid to Markdown (``github``), LaTeX (``latex_booktabs``, through
:mod:`pdelab.report.latex`) and HTML (``unsafehtml``, its cells escaped here), and the
``markdown`` package renders the prose of the page (:mod:`pdelab.report.page`).
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from pdelab.records.atomic import write_text
from pdelab.report import tidy
from pdelab.report.latex import (
    PREAMBLE,
    label_of,
    latex_comment,
    layout,
    table_float,
)
from pdelab.report.page import LONG_CELL, is_number, markdown_html, page, page_of

NAN = re.compile(r"(?<= )[+\-]?nan(?= )")  # a missing float as tabulate prints it, padded
NAN_CELL = re.compile(r"(?<=>)(\s*)[+\-]?nan(\s*)(?=</td>)")
# tabulate pads an HTML cell as it pads a text column; a browser's textContent would keep it
PADDED_CELL = re.compile(r"(<t[hd](?: [^>]*)?>) *(.*?) *(</t[hd]>)", re.S)
MISSING_TEXT = frozenset({"", "n/a", "nan", "—"})  # cells that say nothing about alignment


def csv_of(md: Path | str) -> Path:
    """Where a table's CSV goes: tables/X.md -> tables/X.csv."""
    return Path(md).with_suffix(".csv")


def _missing(value: Any) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    return isinstance(value, str) and value.strip() in MISSING_TEXT


def _numeric(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int | float) or (isinstance(value, str) and is_number(value))


def _html_cell(value: Any) -> Any:
    """A cell as the page shows it: text escaped (a long one in a box that wraps), numbers
    left for tabulate to format as the Markdown does."""
    if not isinstance(value, str):
        return value
    text = html.escape(value, quote=False)
    return f"<div class='long'>{text}</div>" if len(value) > LONG_CELL else text


@dataclass(eq=False)
class Grid:
    """A table of a report file: its DataFrame (no index) and how its cells are formatted.
    With a ``caption`` (Markdown) it is a LaTeX float of its own, labelled tab:<file stem>
    and -<part> after the first; without one it is in the Markdown and the page only."""

    frame: pd.DataFrame
    caption: str | None = None
    part: str = ""
    floatfmt: str | tuple[str, ...] = ".4f"
    numparse: bool = True  # False: cells that are formatted text already stay as written
    missing: str = "n/a"  # what a missing value reads
    dialect: str = "github"  # tabulate's Markdown format (github, pipe)

    def _tabulate(self, frame: pd.DataFrame, fmt: str, **kwargs: Any) -> str:
        return tabulate(
            frame,
            tablefmt=fmt,
            showindex=False,
            floatfmt=self.floatfmt,
            missingval=self.missing,
            disable_numparse=not self.numparse,
            **{"headers": "keys", **kwargs},
        )

    def markdown(self) -> str:
        """The grid as a Markdown table; a NaN that tabulate prints as a number reads
        ``missing``."""
        return NAN.sub(self.missing, self._tabulate(self.frame, self.dialect))

    def latex(self) -> str:
        """The grid as booktabs tabulars, in ASCII (pdelab.report.latex)."""
        return self.layout()[0]

    def layout(self) -> tuple[str, bool]:
        """:meth:`latex` and whether it fits one column of a two-column page."""
        return layout(self.frame, self.floatfmt, self.numparse, self.missing)

    def html(self) -> str:
        """The grid as an HTML table in a scrolling box: cells escaped, a column of numbers
        right-aligned, a long cell wrapped."""
        shown = self.frame.map(_html_cell) if len(self.frame.columns) else self.frame
        align = [
            "right"
            if any(not _missing(v) for v in self.frame[c])
            and all(_missing(v) or _numeric(v) for v in self.frame[c])
            else "left"
            for c in self.frame.columns
        ]
        headers = [html.escape(str(c), quote=False) for c in self.frame.columns]
        text = self._tabulate(
            shown, "unsafehtml", headers=headers, colalign=align if align else None
        )
        text = PADDED_CELL.sub(r"\1\2\3", NAN_CELL.sub(lambda m: html.escape(self.missing), text))
        return f"<div class='scroll'>{text}</div>"


@dataclass(frozen=True)
class Note:
    """A sentence under a table (without its full stop): a paragraph in the Markdown and the
    page, and in LaTeX a footnote inside the file's first float."""

    text: str


Part = str | Grid | Note  # str: Markdown prose (a title, a caption, a heading, a list)


@dataclass(eq=False)
class TableFile:
    """A report table file's parts, in order, and ``data``: the numbers behind it in long form
    (pdelab.report.tidy), written as the CSV beside its Markdown (None: no CSV)."""

    parts: list[Part] = field(default_factory=list)
    data: pd.DataFrame | None = None

    @classmethod
    def titled(
        cls, title: str, header: str, grid: Grid, data: pd.DataFrame | None = None
    ) -> TableFile:
        """A bold title, the header under it and the grid, captioned in LaTeX by both."""
        return cls([f"**{title}**", header, replace(grid, caption=f"{title}. {header}")], data)

    def add(self, *parts: Part) -> TableFile:
        """Further parts under the table (notes, a caption and its grid); returns self."""
        self.parts.extend(parts)
        return self

    def markdown(self) -> str:
        """The parts as Markdown, a blank line between them."""
        shown = [
            p.markdown() if isinstance(p, Grid) else f"{p.text}." if isinstance(p, Note) else p
            for p in self.parts
        ]
        return "\n\n".join(shown) + "\n"

    def latex(self, name: str) -> str:
        """Each captioned grid as a float labelled from ``name`` (the .tex file's stem): a
        ``table`` where it fits one column of a two-column page, else a ``table*``; the notes
        under the first one's tabular."""
        floats = [p for p in self.parts if isinstance(p, Grid) and p.caption is not None]
        notes = [p.text for p in self.parts if isinstance(p, Note)]
        out = []
        for i, grid in enumerate(floats):
            body, fits = grid.layout()
            label = label_of(name, grid.part)
            under = notes if i == 0 else []
            out.append(table_float(body, str(grid.caption), label, under, wide=not fits))
        text = f"{PREAMBLE}\n" + "\n".join(out)
        if not floats:  # nothing to put a note under: the notes as comments
            text += "".join(latex_comment(f"{n}.") for n in notes)
        return text

    def html(self, title: str, profile: str | None) -> str:
        """The page: the profile line, then each part (prose by the markdown package)."""
        body = [
            p.html()
            if isinstance(p, Grid)
            else markdown_html(f"{p.text}." if isinstance(p, Note) else p)
            for p in self.parts
        ]
        return page("\n".join(body), title, profile)

    def write(self, md: Path | str, tex: Path | str | None, profile: str | None) -> Path:
        """Write the Markdown, the LaTeX (when ``tex`` is given), the CSV (when there is
        ``data``) and the page beside the Markdown (``profile``: the run profile whose runs
        it shows, None for a table made without training); return the page's path."""
        md = Path(md)
        write_text(md, self.markdown())
        if tex is not None:
            write_text(tex, self.latex(Path(tex).stem))
        if self.data is not None:
            tidy.check(self.data)  # numbers only, one unit per metric (pdelab.report.tidy)
            write_text(csv_of(md), self.data.to_csv(index=False))
        out = page_of(md)
        write_text(out, self.html(md.stem, profile))
        return out

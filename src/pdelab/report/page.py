"""A report file as a small self-contained HTML page beside its Markdown.

Snakemake's report shows an HTML file inline (in a frame) but Markdown, LaTeX and CSV only as
download links, so every table marked for the report has its page: ``tables/X.md`` ->
``tables/X.html``, written by the job that writes the Markdown and marked for the report beside
it. The page names the run profile that made it.

Nothing is parsed back from a written file. A table's page is rendered from the same parts as
its Markdown (:mod:`pdelab.report.table_file`: each table from its DataFrame by tabulate's
``unsafehtml``, cells escaped here); prose (captions, notes, REPORT.md, each paper's claims) is
converted by the ``markdown`` package, with raw HTML in the text shown as written, not run.

A prose page reads in a browser as its Markdown does on GitHub: each heading below the title
has GitHub's anchor as its id (so a link to ``page.md#anchor`` lands), a link to a Markdown file
that has its page opens the page, and a cell longer than FOLD characters is folded
(``<details>``: its opening words, the whole on a click) instead of cut, but for a verdict
and its reason, always in sight. A document may link the
cells of its tables (:class:`CellLinks`): a number to the runs behind it.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as etree
from pathlib import Path
from typing import Protocol

import markdown
from markdown.extensions import Extension
from markdown.treeprocessors import Treeprocessor

from pdelab.records.atomic import write_text
from pdelab.report.profiles import profile_line

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2937;
       margin: 16px; }
h1, h2, h3 { font-size: 16px; margin: 18px 0 6px; }
p { max-width: 110ch; margin: 6px 0 10px; }
.profile { color: #4b5563; border-left: 3px solid #10b981; padding-left: 8px; }
.scroll { overflow-x: auto; margin: 8px 0 16px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #d1d5db; padding: 3px 8px; text-align: left; white-space: nowrap; }
th { background: #f3f4f6; }
tr:nth-child(even) td { background: #f9fafb; }
td { font-variant-numeric: tabular-nums; }
td.num { text-align: right; }
td.long, td > .long { white-space: normal; min-width: 24ch; max-width: 64ch; }
td details summary { cursor: pointer; color: #374151; }
td details[open] summary { color: #6b7280; }
td a.runs { color: inherit; text-decoration: underline dotted; }
tr:target td { background: #fef3c7; }
code { background: #f3f4f6; padding: 0 3px; border-radius: 3px; }
"""
LONG_CELL = 40  # characters: a longer cell wraps, so a table of sentences fits the page
FOLD = 160  # characters: a longer cell of a prose table is folded, its opening words shown
FOLD_SHOWN = 80  # characters of a folded cell's opening words
UNFOLDED = ("verdict",)  # columns never folded: the reason a verdict rests on stays in sight
NUMBER = re.compile(r"[+\-−]?(\d[\d,]*\.?\d*|\.\d+)(e[+\-]?\d+)?%?")


def page_of(md: Path | str) -> Path:
    """Where the page of a Markdown file goes."""
    return Path(md).with_suffix(".html")


def is_number(text: str) -> bool:
    """A cell that reads as a number (signed, in percent, in e-notation): right-aligned."""
    return NUMBER.fullmatch(text.strip()) is not None


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, characters other than letters, digits,
    ``_``, ``-`` and spaces dropped, each space a ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def opening(text: str, width: int = FOLD_SHOWN) -> str:
    """A text's opening words, at most ``width`` characters, ending in an ellipsis."""
    if len(text) <= width:
        return text
    head = text[: width - 1]
    return (head.rsplit(" ", 1)[0] if " " in head else head).rstrip() + " …"


class CellLinks(Protocol):
    """What a document links in its tables: ``section`` is the heading the table stands under,
    ``header`` its column names, ``row`` one body row's cells (their text)."""

    def cell_href(self, section: str, header: list[str], row: list[str], column: int) -> str | None:
        """Where a cell leads (None: nowhere)."""

    def row_id(self, section: str, header: list[str], row: list[str]) -> str | None:
        """The id a row is reached by (None: none)."""


def text_of(element: etree.Element) -> str:
    return "".join(element.itertext()).strip()


def wrap_content(cell: etree.Element, tag: str, attrib: dict[str, str]) -> etree.Element:
    """Move a cell's text and children into a new child element ``tag``."""
    inner = etree.Element(tag, attrib)
    inner.text, cell.text = cell.text, None
    for child in list(cell):
        cell.remove(child)
        inner.append(child)
    cell.append(inner)
    return inner


def fold(cell: etree.Element, text: str) -> None:
    """A long cell as ``<details>``: its opening words as the summary, the whole inside."""
    details = etree.Element("details")
    summary = etree.SubElement(details, "summary")
    summary.text = opening(text)
    whole = wrap_content(cell, "div", {"class": "long"})
    cell.remove(whole)
    details.append(whole)
    cell.append(details)


class _Tables(Treeprocessor):
    """Each table of the prose in a scrolling box, its numbers right-aligned, its long cells
    wrapped and the longest folded, its cells linked where the document says (``links``); each
    heading below the title with GitHub's anchor as its id; links to a Markdown file that has
    its page (under ``base``) to the page."""

    def __init__(self, md: markdown.Markdown, links: CellLinks | None, base: Path | None) -> None:
        super().__init__(md)
        self.links, self.base = links, base

    def run(self, root: etree.Element) -> None:
        section, seen = "", {}
        for parent in list(root.iter()):
            for i, child in enumerate(list(parent)):
                if re.fullmatch(r"h[1-6]", child.tag):
                    section = text_of(child)
                    if child.tag != "h1":
                        base = anchor(section)
                        n = seen.get(base, 0)
                        seen[base] = n + 1
                        child.set("id", f"{base}-{n}" if n else base)
                if child.tag == "a":
                    self.to_page(child)
                if child.tag != "table":
                    continue
                box = etree.Element("div", {"class": "scroll"})
                box.tail, child.tail = child.tail, "\n"
                parent.remove(child)
                parent.insert(i, box)
                box.append(child)
                self.cells(child, section)

    def to_page(self, link: etree.Element) -> None:
        href = link.get("href") or ""
        target, _, fragment = href.partition("#")
        if self.base is None or not target.endswith(".md") or re.match(r"\w+:", target):
            return
        if page_of(self.base / target).is_file():
            link.set("href", str(page_of(target)) + (f"#{fragment}" if fragment else ""))

    def cells(self, table: etree.Element, section: str) -> None:
        header = [text_of(th) for th in table.iter("th")]
        for tr in table.iter("tr"):
            tds = list(tr.iter("td"))
            row = [text_of(td) for td in tds]
            row_id = self.links.row_id(section, header, row) if self.links and tds else None
            if row_id:
                tr.set("id", row_id)
            for k, cell in enumerate(tds):
                text = row[k]
                href = self.links.cell_href(section, header, row, k) if self.links else None
                if href and text:
                    wrap_content(cell, "a", {"href": href, "class": "runs"})
                if len(text) > FOLD and (k >= len(header) or header[k] not in UNFOLDED):
                    fold(cell, text)
                if len(text) > LONG_CELL:
                    cell.set("class", "long")
                elif is_number(text):
                    cell.set("class", "num")


class _ReportProse(Extension):
    """The report's Markdown: tables and fenced code; raw HTML is text (deregistered)."""

    def __init__(self, links: CellLinks | None = None, base: Path | None = None) -> None:
        super().__init__()
        self.links, self.base = links, base

    def extendMarkdown(self, md: markdown.Markdown) -> None:  # the package names the hook
        md.preprocessors.deregister("html_block")
        md.inlinePatterns.deregister("html")
        md.treeprocessors.register(_Tables(md, self.links, self.base), "report_tables", 0)


def markdown_html(text: str, links: CellLinks | None = None, base: Path | None = None) -> str:
    """Prose of the report (Markdown: headings, paragraphs, lists, ``code``, **bold**,
    *emphasis*, pipe tables) as HTML; ``links``: the cells its tables link, ``base``: the
    folder its relative links start from."""
    return markdown.markdown(text, extensions=["tables", "fenced_code", _ReportProse(links, base)])


def page(body: str, title: str, profile: str | None) -> str:
    """A self-contained HTML page: the profile line, then ``body`` (HTML)."""
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>\n"
        f"<p class='profile'>{html.escape(profile_line(profile))}</p>\n"
        f"{body}\n</body></html>\n"
    )


def write_markdown(
    md: Path | str, text: str, profile: str | None, links: CellLinks | None = None
) -> Path:
    """Write a prose document (REPORT.md, a paper's claims) as Markdown and its page from the
    same text (``profile``: the run profile whose runs it shows; ``links``: the cells its
    tables link); return the page's path."""
    md = Path(md)
    if md.suffix != ".md":
        raise ValueError(f"{md}: a page is written beside a Markdown (.md) file")
    write_text(md, text)
    out = page_of(md)
    write_text(out, page(markdown_html(text, links, md.parent), md.stem, profile))
    return out

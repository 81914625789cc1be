"""A report file as a small self-contained HTML page beside its Markdown.

Snakemake's report shows an HTML file inline (in a frame) but Markdown, LaTeX and CSV only as
download links, so every table marked for the report has its page: ``tables/X.md`` ->
``tables/X.html``, written by the job that writes the Markdown and marked for the report beside
it. The page names the run profile that made it.

Nothing is parsed back from a written file. A table's page is rendered from the same parts as
its Markdown (:mod:`pdelab.report.table_file`: each table from its DataFrame by tabulate's
``unsafehtml``, cells escaped here); prose (captions, notes, REPORT.md, each paper's claims) is
converted by the ``markdown`` package, with raw HTML in the text shown as written, not run.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as etree
from pathlib import Path

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
code { background: #f3f4f6; padding: 0 3px; border-radius: 3px; }
"""
LONG_CELL = 40  # characters: a longer cell wraps, so a table of sentences fits the page
NUMBER = re.compile(r"[+\-−]?(\d[\d,]*\.?\d*|\.\d+)(e[+\-]?\d+)?%?")


def page_of(md: Path | str) -> Path:
    """Where the page of a Markdown file goes."""
    return Path(md).with_suffix(".html")


def is_number(text: str) -> bool:
    """A cell that reads as a number (signed, in percent, in e-notation): right-aligned."""
    return NUMBER.fullmatch(text.strip()) is not None


class _Tables(Treeprocessor):
    """Each table of the prose in a scrolling box, its numbers right-aligned and its long
    cells wrapped, as the tables rendered from DataFrames are."""

    def run(self, root: etree.Element) -> None:
        for parent in list(root.iter()):
            for i, child in enumerate(list(parent)):
                if child.tag != "table":
                    continue
                box = etree.Element("div", {"class": "scroll"})
                box.tail, child.tail = child.tail, "\n"
                parent.remove(child)
                parent.insert(i, box)
                box.append(child)
                for cell in child.iter("td"):
                    text = "".join(cell.itertext())
                    if len(text) > LONG_CELL:
                        cell.set("class", "long")
                    elif is_number(text):
                        cell.set("class", "num")


class _ReportProse(Extension):
    """The report's Markdown: tables and fenced code; raw HTML is text (deregistered)."""

    def extendMarkdown(self, md: markdown.Markdown) -> None:  # the package names the hook
        md.preprocessors.deregister("html_block")
        md.inlinePatterns.deregister("html")
        md.treeprocessors.register(_Tables(md), "report_tables", 0)


def markdown_html(text: str) -> str:
    """Prose of the report (Markdown: headings, paragraphs, lists, ``code``, **bold**,
    *emphasis*, pipe tables) as HTML."""
    return markdown.markdown(text, extensions=["tables", "fenced_code", _ReportProse()])


def page(body: str, title: str, profile: str | None) -> str:
    """A self-contained HTML page: the profile line, then ``body`` (HTML)."""
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>\n"
        f"<p class='profile'>{html.escape(profile_line(profile))}</p>\n"
        f"{body}\n</body></html>\n"
    )


def write_markdown(md: Path | str, text: str, profile: str | None) -> Path:
    """Write a prose document (REPORT.md, a paper's claims) as Markdown and its page from the
    same text (``profile``: the run profile whose runs it shows); return the page's path."""
    md = Path(md)
    if md.suffix != ".md":
        raise ValueError(f"{md}: a page is written beside a Markdown (.md) file")
    write_text(md, text)
    out = page_of(md)
    write_text(out, page(markdown_html(text), md.stem, profile))
    return out

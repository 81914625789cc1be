"""A report table as a small self-contained HTML page, beside its Markdown.

Snakemake's report shows an HTML file inline (in a frame) but Markdown, LaTeX and CSV only as
download links, so every table marked for the report has its page: ``tables/X.md`` ->
``tables/X.html``, written by the job that writes the Markdown (``write_page``) and marked for
the report beside it. The page names the run profile that made the table.

Only the Markdown the tables are written in is read: headings (``#``), paragraphs, bullet
lists, ``**bold**``, ``*emphasis*``, ```code``` and pipe tables (tabulate's github and pipe
formats). Any other text is shown as written, escaped.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from pdelab.atomic import write_text
from pdelab.report.tables import PROFILE_NOTES

NO_PROFILE = "Made without training: the same under every run profile."
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
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.long { white-space: normal; min-width: 24ch; max-width: 64ch; }
code { background: #f3f4f6; padding: 0 3px; border-radius: 3px; }
"""
LONG_CELL = 40  # characters: a longer cell wraps, so a table of sentences fits the page
NUMBER = re.compile(r"[+\-−]?(\d[\d,]*\.?\d*|\.\d+)(e[+\-]?\d+)?%?")
SEPARATOR = re.compile(r"\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?")


def page_of(md: Path | str) -> Path:
    """Where the page of a Markdown table goes."""
    return Path(md).with_suffix(".html")


def profile_line(profile: str | None) -> str:
    """Which run profile made the table, in the words its tables use."""
    if profile is None:
        return NO_PROFILE
    return f"Made by the {PROFILE_NOTES.get(profile, f'{profile} profile')}."


def inline(text: str) -> str:
    """Escaped text with code spans, bold and emphasis (underscores stay literal: they are in
    variant and task names)."""
    out = []
    for i, part in enumerate(re.split(r"`([^`]*)`", text)):
        if i % 2:
            out.append(f"<code>{html.escape(part)}</code>")
            continue
        part = html.escape(part, quote=False)
        part = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", part)
        part = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<em>\1</em>", part)
        out.append(part)
    return "".join(out)


def cells(line: str) -> list[str]:
    """The cells of one pipe-table row (a pipe escaped as ``\\|`` is a character of its cell)."""
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") else line
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]


def table_html(lines: list[str]) -> str:
    """A pipe table (header, separator, rows) as an HTML table; numbers right-aligned, long
    cells wrapped."""
    head, rows = cells(lines[0]), [cells(line) for line in lines[2:]]
    out = ["<div class='scroll'><table>", "<thead><tr>"]
    out += [f"<th>{inline(c)}</th>" for c in head]
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append("<tr>")
        for cell in row:
            kind = " class='num'" if NUMBER.fullmatch(cell) else ""
            kind = " class='long'" if len(cell) > LONG_CELL else kind
            out.append(f"<td{kind}>{inline(cell)}</td>")
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def is_table(lines: list[str], i: int) -> bool:
    """A pipe table starts here: a row, then a separator row."""
    return (
        lines[i].lstrip().startswith("|")
        and i + 1 < len(lines)
        and SEPARATOR.fullmatch(lines[i + 1].strip()) is not None
    )


def body_html(markdown: str) -> str:
    """The Markdown of a report table as HTML."""
    lines, out, i = markdown.splitlines(), [], 0
    while i < len(lines):
        line = lines[i].strip()
        if not line:
            i += 1
        elif is_table(lines, i):
            end = i + 2
            while end < len(lines) and lines[end].lstrip().startswith("|"):
                end += 1
            out.append(table_html(lines[i:end]))
            i = end
        elif heading := re.match(r"(#{1,3})\s+(.*)", line):
            level = len(heading.group(1))
            out.append(f"<h{level}>{inline(heading.group(2))}</h{level}>")
            i += 1
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].strip().startswith("- "):
                items.append(f"<li>{inline(lines[i].strip()[2:])}</li>")
                i += 1
            out.append(f"<ul>{''.join(items)}</ul>")
        else:
            text = []
            while i < len(lines) and (part := lines[i].strip()):
                if part.startswith(("- ", "#")) or is_table(lines, i):
                    break
                text.append(part)
                i += 1
            out.append(f"<p>{inline(' '.join(text))}</p>")
    return "\n".join(out)


def page(markdown: str, title: str, profile: str | None) -> str:
    """A self-contained HTML page: the profile line, then the table's Markdown as HTML."""
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>\n"
        f"<p class='profile'>{html.escape(profile_line(profile))}</p>\n"
        f"{body_html(markdown)}\n</body></html>\n"
    )


def write_page(md: Path | str, profile: str | None) -> Path:
    """Write the page of the Markdown table ``md`` (``profile``: the run profile whose runs it
    shows; None for a table made without training); return its path."""
    md = Path(md)
    if md.suffix != ".md":
        raise ValueError(f"{md}: a table's page is rendered from its Markdown (.md) file")
    out = page_of(md)
    write_text(out, page(md.read_text(), md.stem, profile))
    return out

"""A report's Markdown fitted to a terminal's width (``pdelab show``): prose wrapped, and each
table as written where it fits, else aligned without its Markdown rule, else split into column
groups that each repeat the row's first column, else (a column too wide for any group) pivoted
to one block per row, each cell on its own lines under its column's name. No line is wider
than the width."""

from __future__ import annotations

import re
import textwrap

from pdelab.report.document import row_cells

MIN_WIDTH = 20  # narrower than this, nothing reads: fitted to this instead
GAP = " | "


def wrapped(line: str, width: int) -> list[str]:
    """A prose line wrapped to ``width``, a list item's or quote's text indented under it."""
    if len(line) <= width:
        return [line]
    lead = re.match(r"\s*([-*>]|\d+\.)?\s*", line)[0]
    return textwrap.wrap(
        line, width, subsequent_indent=" " * len(lead), break_on_hyphens=False
    ) or [""]


def grid(rows: list[list[str]], columns: list[int]) -> list[str]:
    """These columns of the rows, padded to their widths, the header underlined."""
    widths = [max(len(r[c]) if c < len(r) else 0 for r in rows) for c in columns]
    lines = [
        GAP.join(
            (r[c] if c < len(r) else "").ljust(w) for c, w in zip(columns, widths, strict=True)
        ).rstrip()
        for r in rows
    ]
    rule = GAP.join("-" * w for w in widths)
    return [lines[0], rule, *lines[1:]]


def column_groups(rows: list[list[str]], width: int) -> list[list[int]] | None:
    """Columns 1.. in groups that fit ``width`` beside column 0, or None where one cannot."""
    widths = [max(len(r[c]) if c < len(r) else 0 for r in rows) for c in range(len(rows[0]))]
    groups: list[list[int]] = []
    used = width + 1
    for c in range(1, len(widths)):
        if widths[0] + len(GAP) + widths[c] > width:
            return None
        if used + len(GAP) + widths[c] > width:
            groups.append([0])
            used = widths[0]
        groups[-1].append(c)
        used += len(GAP) + widths[c]
    return groups or [[0]]


def records(rows: list[list[str]], width: int) -> list[str]:
    """Each body row as a block: its cells under their column names, wrapped to ``width``."""
    header, out = rows[0], []
    for row in rows[1:]:
        out.append("-" * min(width, 40))
        for name, cell in zip(header, row, strict=False):
            if cell:
                out += textwrap.wrap(
                    f"{name}: {cell}", width, subsequent_indent="    ", break_on_hyphens=False
                )
    return out


def table(lines: list[str], width: int) -> list[str]:
    """A Markdown table fitted to ``width`` (see the module's account): as written if it fits."""
    if max(map(len, lines)) <= width:
        return lines
    rows = [row_cells(line) for i, line in enumerate(lines) if i != 1]
    rows = [[c.replace("\\|", "|") for c in r] for r in rows]
    whole = grid(rows, list(range(len(rows[0]))))
    if max(map(len, whole)) <= width:
        return whole
    groups = column_groups(rows, width)
    if groups is None:
        return records(rows, width)
    out: list[str] = []
    for group in groups:
        out += [*grid(rows, group), ""]
    return out[:-1]


def fit(text: str, width: int) -> list[str]:
    """Markdown text as lines no wider than ``width`` (at least MIN_WIDTH)."""
    width = max(width, MIN_WIDTH)
    lines = text.rstrip("\n").split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out += table(lines[i:j], width) if j - i >= 2 else wrapped(lines[i], width)
            i = j
            continue
        out += wrapped(lines[i], width)
        i += 1
    return out

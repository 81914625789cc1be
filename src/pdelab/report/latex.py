"""A report table as LaTeX that pastes into a paper: a ``table`` float with booktabs rules, the
report's caption as ``\\caption`` and a ``\\label``, and nothing pdflatex rejects by default.

The report's text is Unicode (Δ, ±, α, −, ‖...), which pdflatex's default fonts do not have:
every character outside ASCII is written as LaTeX (``$\\Delta$``, ``$\\pm$``, ``---``), runs of
them as one math span, so that a document with only ``\\usepackage{booktabs}`` compiles every
table (tests/test_latex.py compiles them with pdflatex).
"""

from __future__ import annotations

import math
import re
import unicodedata

import pandas as pd
from tabulate import tabulate

from pdelab.spec.display_names import display_text

PREAMBLE = "% needs \\usepackage{booktabs}"

# characters written in math mode (joined into one $...$ with their neighbours)
MATH = {
    "±": r"\pm",
    "−": "-",
    "×": r"\times",
    "·": r"\cdot",
    "≤": r"\leq",
    "≥": r"\geq",
    "≠": r"\neq",
    "≈": r"\approx",
    "∞": r"\infty",
    "→": r"\to",
    "←": r"\leftarrow",
    "‖": r"\|",
    "√": r"\surd",
    "∇": r"\nabla",
    "∂": r"\partial",
    "∈": r"\in",
    "∑": r"\sum",
    "∝": r"\propto",
    "∼": r"\sim",
    "°": r"^{\circ}",
    "µ": r"\mu",
    "φ": r"\varphi",
    "ε": r"\varepsilon",
}
# characters written in text mode
TEXT = {
    "—": "---",
    "–": "--",
    "’": "'",
    "‘": "`",
    "“": "``",
    "”": "''",
    "…": r"\ldots{}",
    "\u00a0": "~",
    "é": r"\'{e}",
    "è": r"\`{e}",
    "ö": r"\"{o}",
    "ü": r"\"{u}",
    "ä": r"\"{a}",
}
SUPERSCRIPTS = dict(zip("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁱⁿˡᵀᵏ", "0123456789+-=()inlTk", strict=True))
SUBSCRIPTS = dict(zip("₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₒₓₖₗₘₙₚₛₜ", "0123456789+-=()aeoxklmnpst", strict=True))
GREEK_CAPITALS = {"Gamma", "Delta", "Theta", "Lambda", "Xi", "Pi", "Sigma", "Phi", "Psi", "Omega"}
SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\^{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
}


def greek(char: str) -> str | None:
    """A Greek letter's LaTeX command (a capital without one is its Latin twin), else None."""
    name = unicodedata.name(char, "")
    found = re.fullmatch(r"GREEK (SMALL|CAPITAL) LETTER (\w+)", name)
    if not found:
        return None
    letter = found.group(2).capitalize()
    if found.group(1) == "SMALL":
        return "o" if letter == "Omicron" else "\\" + letter.lower()
    if letter in GREEK_CAPITALS:
        return "\\" + letter
    return unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode() or "?"


def _math_token(run: str, i: int) -> tuple[str | None, int]:
    """The math form of the character(s) at run[i] and where the next token starts; None when
    the character is not written in math mode."""
    char = run[i]
    for table, mark in ((SUPERSCRIPTS, "^"), (SUBSCRIPTS, "_")):
        if char in table:  # a run of super/subscripts is one script, not a double one
            end = i
            while end < len(run) and run[end] in table:
                end += 1
            return f"{mark}{{{''.join(table[c] for c in run[i:end])}}}", end
    if char in MATH:
        return MATH[char], i + 1
    if (command := greek(char)) is not None and command.startswith("\\"):
        return command, i + 1
    return None, i + 1


def unicode_to_latex(text: str) -> str:
    """Text whose LaTeX specials are already escaped, with every non-ASCII character written
    as LaTeX; neighbouring math characters share one ``$...$``."""
    out: list[str] = []
    math: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char.isascii():
            if math:
                out.append("$" + " ".join(math) + "$")
                math = []
            out.append(char)
            i += 1
            continue
        token, i = _math_token(text, i)
        if token is not None:
            math.append(token)
            continue
        if math:
            out.append("$" + " ".join(math) + "$")
            math = []
        if char in TEXT:
            out.append(TEXT[char])
        elif (letter := greek(char)) is not None:
            out.append(letter)
        else:
            ascii_form = unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode()
            out.append(escape(ascii_form) if ascii_form else "?")
    if math:
        out.append("$" + " ".join(math) + "$")
    return "".join(out)


def escape(text: str) -> str:
    """LaTeX's special characters escaped (ASCII only; see unicode_to_latex)."""
    return "".join(SPECIALS.get(c, c) for c in text)


def latex_text(markdown: str) -> str:
    """A caption or note of the report (its Markdown: ``code``, **bold**, *emphasis*) as
    LaTeX."""
    parts = []
    for i, part in enumerate(re.split(r"`([^`]*)`", markdown)):
        if i % 2:
            parts.append(r"\texttt{" + unicode_to_latex(escape(part)) + "}")
            continue
        part = unicode_to_latex(escape(part))
        part = re.sub(r"\*\*(.+?)\*\*", r"\\textbf{\1}", part)
        part = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"\\emph{\1}", part)
        parts.append(part)
    return "".join(parts)


# the page the tables are sized for: a two-column article at 10pt (pdflatex's measures)
COLUMN_WIDTH_PT = 229.5
TEXT_WIDTH_PT = 469.0
CHAR_PT = 4.6  # a \footnotesize character, a little over the average, so an estimate errs wide
COLUMN_SEP_PT = 6.0  # 2 \tabcolsep at 3pt
HEADER_LINE = 12  # a header longer than this is stacked over lines of words
NUMBER_CELL = re.compile(r"[+\-−]?\.?\d")  # a cell that starts with a number: "86.5 ± 0.9 (n=3)"
FONT = "\\footnotesize\\setlength{\\tabcolsep}{3pt}"


def _missing(value: object) -> bool:
    return (
        value is None
        or (isinstance(value, float) and math.isnan(value))
        or str(value).strip() in {"", "n/a", "nan", "—", "-", "n/a (stand-in)"}
    )


def numeric_column(values: pd.Series) -> bool:
    """Every cell a number, or text that starts with one (a mean with its spread, an
    interval): the column is right-aligned."""
    shown = [v for v in values if not _missing(v)]
    return bool(shown) and all(
        isinstance(v, int | float) and not isinstance(v, bool) or NUMBER_CELL.match(str(v).strip())
        for v in shown
    )


def header_lines(header: str) -> list[str]:
    """A header's words in lines of at most HEADER_LINE characters (a longer word alone)."""
    lines: list[str] = []
    for word in header.split():
        if lines and len(lines[-1]) + 1 + len(word) <= HEADER_LINE:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [""]


def shown_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as a paper prints it: tasks and variants (headers and text cells) by their
    display names (pdelab.spec.display_names)."""
    text = frame.copy()
    text.columns = [display_text(str(c)) for c in frame.columns]
    for i in range(len(text.columns)):
        column = text.iloc[:, i]
        if not pd.api.types.is_numeric_dtype(column):
            text.isetitem(i, column.map(lambda v: display_text(v) if isinstance(v, str) else v))
    return text


def estimated_width(frame: pd.DataFrame, body: list[list[str]]) -> list[float]:
    """Each column's width in points, estimated from its longest cell and header line."""
    widths = []
    for i, column in enumerate(frame.columns):
        cells = [len(row[i]) for row in body if i < len(row)]
        longest = max([*cells, *(len(line) for line in header_lines(str(column)))])
        widths.append(longest * CHAR_PT + COLUMN_SEP_PT)
    return widths


def _cells(text: str) -> list[list[str]]:
    """The rows of a tabulate booktabs tabular, as cell strings (LaTeX, before Unicode)."""
    rows = []
    for line in text.splitlines():
        if line.endswith("\\\\"):
            rows.append([c.strip() for c in re.split(r"(?<!\\)&", line[:-2])])
    return rows


def tabular(
    frame: pd.DataFrame,
    floatfmt: str | tuple[str, ...] = ".4f",
    numparse: bool = True,
    missing: str = "n/a",
) -> str:
    """The frame as booktabs ``tabular`` s (no index) sized for one column of a two-column
    page: cells escaped and Unicode written as LaTeX, tasks and variants by their display
    names, number columns right-aligned, long headers stacked; a table wider than a column is
    split into tabulars of its columns under each other, each repeating the first column."""
    return layout(frame, floatfmt, numparse, missing)[0]


def layout(
    frame: pd.DataFrame,
    floatfmt: str | tuple[str, ...] = ".4f",
    numparse: bool = True,
    missing: str = "n/a",
) -> tuple[str, bool]:
    """:func:`tabular`'s text and whether each of its tabulars is estimated to fit one column
    (False: the float is a ``table*``, across the page)."""
    shown = shown_frame(frame)
    align = ["r" if numeric_column(frame.iloc[:, i]) else "l" for i in range(len(frame.columns))]
    formats = floatfmt if isinstance(floatfmt, tuple) else (floatfmt,) * len(frame.columns)
    full = _render(shown, formats, numparse, missing, align)
    widths = estimated_width(shown, _cells(full)[1:])
    groups = column_groups(widths)
    fits = all(sum(widths[i] for i in g) <= COLUMN_WIDTH_PT for g in groups)
    if len(groups) == 1:
        return full, fits
    parts = [
        _render(
            shown.iloc[:, g],
            tuple(formats[i] for i in g),
            numparse,
            missing,
            [align[i] for i in g],
        )
        for g in groups
    ]
    return "\n\\medskip\n".join(parts), fits


def column_groups(widths: list[float], room: float = COLUMN_WIDTH_PT) -> list[list[int]]:
    """Column indices in groups that each fit ``room``, every group after the first led by
    column 0 (the row names); one group when it all fits or a split cannot help."""
    if sum(widths) <= room or len(widths) < 3:
        return [list(range(len(widths)))]
    groups: list[list[int]] = [[0]]
    for i in range(1, len(widths)):
        used = sum(widths[j] for j in groups[-1])
        if len(groups[-1]) > 1 and used + widths[i] > room:
            groups.append([0])
        groups[-1].append(i)
    return groups


def _render(
    frame: pd.DataFrame,
    floatfmt: tuple[str, ...],
    numparse: bool,
    missing: str,
    align: list[str],
) -> str:
    text = tabulate(
        frame,
        headers="keys",
        tablefmt="latex_booktabs",
        showindex=False,
        floatfmt=floatfmt,
        missingval=missing,
        disable_numparse=not numparse,
        colalign=[{"r": "right", "l": "left"}[a] for a in align] or None,
    )
    text = re.sub(r"(?<=\s)[+\-]?nan(?=\s)", missing, text)
    lines = text.splitlines()
    head = lines.index("\\toprule") + 1
    cells = [c.strip() for c in re.split(r"(?<!\\)&", lines[head][:-2])]
    lines[head] = " & ".join(_stacked(c, a) for c, a in zip(cells, align, strict=True)) + " \\\\"
    return unicode_to_latex("\n".join(lines).replace("|", r"\textbar{}"))


def _stacked(header: str, align: str) -> str:
    """A long header as lines in a tabular of its own (plain LaTeX: no package needed)."""
    lines = header_lines(header)
    if len(lines) == 1:
        return header
    return f"\\begin{{tabular}}[b]{{@{{}}{align}@{{}}}}" + " \\\\{} ".join(lines) + "\\end{tabular}"


def label_of(name: str, part: str = "") -> str:
    """A table's label: tab:<file stem>, and -<part> for a second table in the same file."""
    safe = re.sub(r"[^A-Za-z0-9_:.-]", "-", name)
    return f"tab:{safe}" + (f"-{part}" if part else "")


CAPTION_SENTENCES = 2  # a caption says what the table is; the rest are notes under it
ABBREVIATIONS = (
    "e.g.",
    "i.e.",
    "Sec.",
    "Eq.",
    "Eqs.",
    "Fig.",
    "Figs.",
    "vs.",
    "cf.",
    "al.",
    "Tab.",
    "Thm.",
    "Cor.",
    "approx.",
    "resp.",
    "No.",
)


def sentences(text: str) -> list[str]:
    """A caption's sentences: split after a full stop (or ? !) and a space before a capital,
    a digit-free word or markup, not after a common abbreviation."""
    out: list[str] = []
    start = 0
    for found in re.finditer(r"(?<=[.!?])\s+(?=[A-Z*`(\"ΔΛα-ω])", text):
        before = text[start : found.start()]
        if before.split()[-1:] and before.split()[-1].endswith(ABBREVIATIONS):
            continue
        out.append(before.strip())
        start = found.end()
    out.append(text[start:].strip())
    return [s for s in out if s]


def table_float(
    body: str, caption: str, label: str, notes: list[str] | None = None, wide: bool = False
) -> str:
    """A ``table`` float (``table*`` when ``wide``: across both columns) around a tabular: a
    caption of at most two sentences (Markdown) and its label, the tabular in a footnote
    size, then the caption's further sentences and the ``notes`` under it."""
    said = sentences(caption)
    under = [*said[CAPTION_SENTENCES:], *(f"{n}." for n in notes or [])]
    below = "".join(f"\n\\par\\smallskip\n{{\\footnotesize {latex_text(n)}}}" for n in under)
    env = "table*" if wide else "table"
    return (
        f"\\begin{{{env}}}[htbp]\n\\centering\n"
        f"\\caption{{{latex_text(' '.join(said[:CAPTION_SENTENCES]))}}}\n\\label{{{label}}}\n"
        f"{FONT}\n{body}{below}\n\\end{{{env}}}\n"
    )


def latex_table(
    frame: pd.DataFrame,
    caption: str,
    label: str,
    floatfmt: str = ".4f",
    numparse: bool = True,
) -> str:
    """One table of the report as a LaTeX float (see the module's docstring)."""
    body, fits = layout(frame, floatfmt, numparse)
    return table_float(body, caption, label, wide=not fits)


def latex_comment(text: str) -> str:
    """A line of the report as a LaTeX comment, in ASCII."""
    return "% " + unicode_to_latex(text.replace("\n", " ")) + "\n"

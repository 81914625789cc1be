"""A report table as LaTeX that pastes into a paper: a ``table`` float with booktabs rules, the
report's caption as ``\\caption`` and a ``\\label``, and nothing pdflatex rejects by default.

The report's text is Unicode (Δ, ±, α, −, ‖...), which pdflatex's default fonts do not have:
every character outside ASCII is written as LaTeX (``$\\Delta$``, ``$\\pm$``, ``---``), runs of
them as one math span, so that a document with only ``\\usepackage{booktabs}`` compiles every
table (tests/test_latex.py compiles them with pdflatex).
"""

from __future__ import annotations

import re
import unicodedata

import pandas as pd
from tabulate import tabulate

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


def tabular(
    frame: pd.DataFrame,
    floatfmt: str | tuple[str, ...] = ".4f",
    numparse: bool = True,
    missing: str = "n/a",
) -> str:
    """The frame as a booktabs ``tabular`` (no index), cells escaped and Unicode written as
    LaTeX."""
    text = tabulate(
        frame,
        headers="keys",
        tablefmt="latex_booktabs",
        showindex=False,
        floatfmt=floatfmt,
        missingval=missing,
        disable_numparse=not numparse,
    )
    text = re.sub(r"(?<=\s)[+\-]?nan(?=\s)", missing, text)
    return unicode_to_latex(text.replace("|", r"\textbar{}"))


def label_of(name: str, part: str = "") -> str:
    """A table's label: tab:<file stem>, and -<part> for a second table in the same file."""
    safe = re.sub(r"[^A-Za-z0-9_:.-]", "-", name)
    return f"tab:{safe}" + (f"-{part}" if part else "")


def table_float(body: str, caption: str, label: str) -> str:
    """A ``table`` float around a tabular, with the caption (Markdown) and label."""
    return (
        "\\begin{table}[htbp]\n\\centering\n"
        f"\\caption{{{latex_text(caption)}}}\n\\label{{{label}}}\n"
        f"{body}\n\\end{{table}}\n"
    )


def latex_table(
    frame: pd.DataFrame,
    caption: str,
    label: str,
    floatfmt: str = ".4f",
    numparse: bool = True,
) -> str:
    """One table of the report as a LaTeX float (see the module's docstring)."""
    return table_float(tabular(frame, floatfmt, numparse), caption, label)


def latex_comment(text: str) -> str:
    """A line of the report as a LaTeX comment, in ASCII."""
    return "% " + unicode_to_latex(text.replace("\n", " ")) + "\n"

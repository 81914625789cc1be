"""Paste-ready LaTeX: every table the report writes is a captioned, labelled booktabs float in
ASCII that pdflatex compiles in a minimal document (Debian's texlive-latex-recommended; the
compile tests skip, saying so, without pdflatex). The tables compiled: every study's, made
from the golden summary (tests/golden), the theory tables of Fractional Neural Attention, and
whatever a build left in results/tables/."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import ROOT
from pdelab.report.__main__ import main
from pdelab.report.latex import latex_table, latex_text, unicode_to_latex
from pdelab.report.table_file import csv_of

GOLDEN = Path(__file__).parent / "golden"
STUDIES = list(yaml.safe_load((GOLDEN / "params.yaml").read_text())["studies"])
DOCUMENT = (
    "\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n%s\n\\end{document}\n"
)
needs_pdflatex = pytest.mark.skipif(
    shutil.which("pdflatex") is None,
    reason="pdflatex not installed (Debian: apt-get install texlive-latex-recommended)",
)


def test_unicode_is_written_as_latex() -> None:
    assert unicode_to_latex("listops Δ") == r"listops $\Delta$"
    assert unicode_to_latex("49.99 ± 38.35 (n=2)") == r"49.99 $\pm$ 38.35 (n=2)"
    assert unicode_to_latex("α = 0.5, ours − paper") == r"$\alpha$ = 0.5, ours $-$ paper"
    assert unicode_to_latex("‖H‖₂ ≤ 1") == r"$\|$H$\| _{2}$ $\leq$ 1"
    assert unicode_to_latex("W⁽ˡ⁾ — é") == r"W$^{(l)}$ --- \'{e}"


def test_a_caption_keeps_its_markup_and_escapes_the_rest() -> None:
    text = latex_text("Accuracy of **ours** in `task_a` (5% of runs, Δ < 1)")
    assert text == (
        r"Accuracy of \textbf{ours} in \texttt{task\_a} (5\% of runs, $\Delta$ \textless{} 1)"
    )


def test_a_table_is_a_float_with_caption_label_and_booktabs() -> None:
    frame = pd.DataFrame({"variant": ["base_line"], "acc Δ": ["+1.00 ± 0.50"]})
    tex = latex_table(frame, "**T**. Δ in points", "tab:t", numparse=False)
    assert tex.startswith("\\begin{table}") and tex.rstrip().endswith("\\end{table}")
    assert "\\caption{\\textbf{T}. $\\Delta$ in points}" in tex and "\\label{tab:t}" in tex
    # an identifier reads as words (pdelab.spec.display_names), no longer as base\_line;
    # a column of numbers with their spread is right-aligned
    assert "\\toprule" in tex and " base line " in tex and "$\\pm$" in tex
    assert "\\begin{tabular}{lr}" in tex
    assert tex.isascii()


def test_a_long_caption_keeps_two_sentences_and_puts_the_rest_under_the_table() -> None:
    frame = pd.DataFrame({"variant": ["a"], "x": [1.0]})
    tex = latex_table(frame, "One. Two, e.g. this. Three. Four", "tab:t")
    assert "\\caption{One. Two, e.g. this.}" in tex
    assert tex.index("\\end{tabular}") < tex.index("Three.") < tex.index("Four")


def study_tables(out: Path) -> list[Path]:
    """Every study's table of the golden summary, written as the report's study rule does."""
    shutil.copytree(GOLDEN / "cost", out / "cost")
    (out / "tables").mkdir()
    common = ["--params", str(GOLDEN / "params.yaml"), "--summary", str(GOLDEN / "summary.parquet")]
    for study in STUDIES:
        md, tex = out / "tables" / f"{study}.md", out / "tables" / f"{study}.tex"
        figure = out / f"{study}.png"
        main(["study", study, *common, "--md", str(md), "--tex", str(tex), "--figure", str(figure)])
    return sorted((out / "tables").glob("*.tex"))


def test_every_study_table_has_its_csv(tmp_path: Path) -> None:
    for tex in study_tables(tmp_path):
        csv = csv_of(tex.with_suffix(".md"))
        frame = pd.read_csv(csv)
        assert len(frame) and len(frame.columns) > 1, csv
        assert "\\label{tab:" + tex.stem + "}" in tex.read_text()


def compile_failures(files: list[Path], work: Path) -> list[str]:
    """The files pdflatex rejects, each in a minimal document of its own, with its error."""
    failed = []
    for i, tex in enumerate(files):
        (work / f"doc{i}.tex").write_text(DOCUMENT % f"\\input{{{tex}}}")
        run = subprocess.run(
            ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", f"doc{i}.tex"],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if run.returncode:
            errors = [line for line in run.stdout.splitlines() if line.startswith("!")]
            failed.append(f"{tex}: {errors[:3]}")
    return failed


@pytest.mark.slow
@needs_pdflatex
def test_every_table_compiles_with_pdflatex(tmp_path: Path) -> None:
    from pdelab.papers.fractional_attention.theory_report import build

    files = study_tables(tmp_path / "golden")
    build(tmp_path / "fna", alphas=[1.2, 2.0], refine=1)
    files += sorted((tmp_path / "fna" / "tables").glob("*.tex"))
    files += sorted((ROOT / "results" / "tables").glob("*.tex"))  # a build's, where there is one
    for tex in files:
        assert tex.read_text().isascii(), f"{tex}: not ASCII"
    work = tmp_path / "latex"
    work.mkdir()
    assert compile_failures(files, work) == []


TWO_COLUMN = (
    "\\documentclass[twocolumn]{article}\n\\usepackage{booktabs}\n\\newsavebox\\measured\n"
    "\\begin{document}\n%s\n\\end{document}\n"
)
# the tables set across the page (``table*``), each with why no split fits them in a column
FULL_WIDTH = {
    "pde_longformer": "its first column names the model and every other column is a run's "
    "perplexity with its probe: a split repeats a column wider than half the page",
    "pde_types": "as pde_longformer: the PDE names and the leak-free runs beside them",
}


def measured_widths(tex: Path, work: Path) -> list[tuple[str, float, float, float]]:
    """(environment, width of each tabular, column width, text width) in points, as pdflatex
    sets the file in a two-column article: each tabular boxed and its width typed out."""
    text = tex.read_text()
    boxed = re.sub(
        r"^\\begin\{tabular\}.*?^\\end\{tabular\}$",  # the outer ones: a line each
        lambda m: (
            "\\sbox\\measured{" + m.group(0) + "}\\typeout{WIDTH \\the\\wd\\measured\\space"
            " \\the\\columnwidth\\space \\the\\textwidth}\\usebox\\measured"
        ),
        text,
        flags=re.S | re.M,
    )
    (work / "boxed.tex").write_text(boxed)
    (work / "doc.tex").write_text(TWO_COLUMN % "\\input{boxed.tex}")
    run = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout[-2000:]
    env = "table*" if "\\begin{table*}" in text else "table"
    found = re.findall(r"WIDTH ([\d.]+)pt ([\d.]+)pt ([\d.]+)pt", run.stdout)
    return [(env, float(w), float(c), float(t)) for w, c, t in found]


@pytest.mark.slow
@needs_pdflatex
def test_every_table_fits_a_column_or_is_listed_full_width(tmp_path: Path) -> None:
    """Each tabular of every study table is measured: a ``table`` fits one column of a
    two-column page, a ``table*`` the page's width, and only the tables FULL_WIDTH lists
    (with their reasons) are set across the page."""
    files = study_tables(tmp_path / "golden")
    wide = set()
    for tex in files:
        work = tmp_path / tex.stem
        work.mkdir()
        widths = measured_widths(tex, work)
        assert widths, f"{tex}: no tabular measured"
        for env, width, column, page in widths:
            room = page if env == "table*" else column
            assert width <= room + 0.5, f"{tex.stem}: {width}pt in a {env} of {room}pt"
            if env == "table*":
                wide.add(tex.stem)
    assert wide <= set(FULL_WIDTH), (
        f"set across the page without a reason: {wide - set(FULL_WIDTH)}"
    )

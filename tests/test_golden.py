"""The report is pinned byte for byte: from a fixed summary (tests/golden/summary.parquet, made
by make_fixture.py) and a snapshot of params.yaml, every study's table (md and tex) and
REPORT.md must equal the files in tests/golden/expected/, written before papers became plug-ins
and since changed only by the renamed IMDb tasks (their names, the column widths they set, and
the runs table's rows, which are sorted by task), by REPORT.md's headline form (a table with
cells over 100 characters shown cut, one over 40 rows not shown, each linked whole from
results/report/; the tables themselves are unchanged) and by the table of contents after its
profile line, and by the claims kit (each paper's claims as findings and run verdicts with
coverage and seeds needed; study tables in percent with Δ in points; the coverage counting
decided and undecided apart, readings and ambiguous as printed, stand-in marks, and the
multi-scale table's gain over the paper's best single scale beside the gain over ours), and
by the paste-ready forms: LaTeX as a captioned, labelled float in ASCII, and columns missing on
every row, or repeating the profile, left out of a table and named in its caption; and by
tidy, paste-ready tables: the seeds and multi-scale tables in percent like every accuracy, and
LaTeX with tasks and variants by their papers' names, numbers right-aligned, long headers
stacked, captions of two sentences with the rest under the table, a table wider than a column
split into tabulars that repeat its first column (``table*`` where none fits); and by
REPORT.md as an index that opens with the scoreboard (each paper's claims by verdict, linked
to the paper's page, results/report/<paper>.md, which now holds its claims, studies and
appendix).
Only the commit and the MLflow path, which depend on where the test runs, are masked. The cost
study reads a fixed step timing (tests/golden/cost/), laid out as in results/."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from pdelab.report.__main__ import main

GOLDEN = Path(__file__).parent / "golden"
EXPECTED = GOLDEN / "expected"
STUDIES = list(yaml.safe_load((GOLDEN / "params.yaml").read_text())["studies"])
COMMON = ["--params", str(GOLDEN / "params.yaml"), "--summary", str(GOLDEN / "summary.parquet")]


def masked(text: str) -> str:
    text = re.sub(r"at commit `[^`]*`", "at commit `<commit>`", text)
    return re.sub(r"logged to MLflow at `[^`]*`", "logged to MLflow at `<uri>`", text)


@pytest.mark.parametrize("study", STUDIES)
def test_study_tables_are_unchanged(study: str, tmp_path: Path) -> None:
    shutil.copytree(GOLDEN / "cost", tmp_path / "cost")  # results/cost/, the cost study's timing
    (tmp_path / "tables").mkdir()
    md, tex = tmp_path / "tables" / f"{study}.md", tmp_path / "tables" / f"{study}.tex"
    figure = tmp_path / f"{study}.png"
    main(["study", study, *COMMON, "--md", str(md), "--tex", str(tex), "--figure", str(figure)])
    assert md.read_text() == (EXPECTED / "tables" / f"{study}.md").read_text()
    assert tex.read_text() == (EXPECTED / "tables" / f"{study}.tex").read_text()
    assert figure.stat().st_size > 0


def test_report_is_unchanged(tmp_path: Path) -> None:
    shutil.copytree(EXPECTED / "tables", tmp_path / "tables")  # the studies', theory, diagnostics
    shutil.copytree(GOLDEN / "cost", tmp_path / "cost")
    out = tmp_path / "REPORT.md"
    main(["report", *COMMON, "--out", str(out)])
    assert masked(out.read_text()) == masked((EXPECTED / "REPORT.md").read_text())
    runs = (tmp_path / "report" / "runs.md").read_text()  # the Runs table, linked whole
    assert runs.count("\n| ") == 197 + 1
    # each paper's claims whole, as the page Snakemake's report shows inline, and REPORT.md's
    pages = sorted((tmp_path / "claims").glob("*.html"))
    assert len(pages) == len({p.stem for p in (tmp_path / "claims").glob("*.md")}) == 2
    for page in pages:
        text = page.read_text()
        assert "the claims audited" in text and "<table>" in text, page
    assert "Verdicts of this profile's runs" in "".join(p.read_text() for p in pages)
    assert "<h1>pdelab report</h1>" in (tmp_path / "REPORT.html").read_text()

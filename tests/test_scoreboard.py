"""The report a reader takes in at a glance: REPORT.md and its page open with the scoreboard
(each paper's claims by verdict, each count a link that lands on those claims), each paper has
its page opening with its own, every number of a study's table leads to the runs behind it,
and `pdelab show` fits the terminal or hands the CSV to a pipe. Built from the golden fixture
(tests/golden), so nothing here trains."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pdelab.cli import main as cli
from pdelab.report.__main__ import main
from pdelab.report.document import row_cells
from pdelab.report.page import anchor
from pdelab.report.scoreboard import GROUPS

GOLDEN = Path(__file__).parent / "golden"
PARAMS = str(GOLDEN / "params.yaml")
STUDIES = list(yaml.safe_load((GOLDEN / "params.yaml").read_text())["studies"])
COMMON = ["--params", PARAMS, "--summary", str(GOLDEN / "summary.parquet")]
SCREEN = 24  # lines of a terminal's first screen
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The golden fixture's report: every study's files (md, tex, csv, page), then REPORT.md."""
    results = tmp_path_factory.mktemp("results")
    shutil.copytree(GOLDEN / "expected" / "tables", results / "tables")
    shutil.copytree(GOLDEN / "cost", results / "cost")
    shutil.copy(GOLDEN / "summary.parquet", results / "summary.parquet")
    for study in STUDIES:
        md, tex = results / "tables" / f"{study}.md", results / "tables" / f"{study}.tex"
        figure = results / "figures" / f"{study}.png"
        main(["study", study, *COMMON, "--md", str(md), "--tex", str(tex), "--figure", str(figure)])
    main(["report", *COMMON, "--out", str(results / "REPORT.md")])
    return results


def tables(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line index of each Markdown table."""
    found, i = [], 0
    while i < len(lines):
        if lines[i].startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            found.append((i, j - 1))
            i = j
        else:
            i += 1
    return found


def references(lines: list[str]) -> dict[str, str]:
    return dict(m.groups() for line in lines if (m := re.fullmatch(r"\[(\d+)\]: (\S+)", line)))


def headings(text: str) -> set[str]:
    return {anchor(h) for h in re.findall(r"^#{2,6} (.+)$", text, re.M)}


def test_the_scoreboard_is_report_mds_first_screen(built: Path) -> None:
    lines = (built / "REPORT.md").read_text().split("\n")
    first, last = tables(lines)[0]
    assert last < SCREEN, "the scoreboard ends below the first screen"
    assert [line for line in lines[:first] if line.startswith("## ")] == ["## Scoreboard"]
    header = row_cells(lines[first])
    assert header == ["paper", "claims", *(g.name for g in GROUPS)]
    refs = references(lines)
    papers = 0
    for row in map(row_cells, lines[first + 2 : last + 1]):
        papers += 1
        counts = [int(re.match(r"\[?(\d+)", c)[1]) for c in row[1:]]
        assert counts[0] == sum(counts[1:]), row  # every claim in one group
        for cell, name in zip(row[1:], header[1:], strict=True):
            if cell == "0":
                continue
            page, _, target = refs[re.fullmatch(r"\[\d+\]\[(\d+)\]", cell)[1]].partition("#")
            text = (built / page).read_text()
            assert target in headings(text), (name, target)  # the link lands on its claims
    assert papers == 2


def test_each_paper_page_opens_with_its_scoreboard_and_keeps_every_column(built: Path) -> None:
    from pdelab.report.claims import FINDING_COLUMNS, RUN_COLUMNS

    for page in sorted((built / "report").glob("*.md")):
        if page.stem == "runs":
            continue
        lines = page.read_text().split("\n")
        assert lines[0].startswith("# ")
        first, last = tables(lines)[0]
        assert row_cells(lines[first]) == ["claims", "count", "by verdict"] and last < SCREEN
        claims = [row_cells(lines[a]) for a, _ in tables(lines)[1:]]
        assert FINDING_COLUMNS in claims and RUN_COLUMNS in claims
        assert "…" not in page.read_text()  # nothing cut: the reasons whole


def test_the_html_report_folds_long_cells_and_links_numbers_to_their_runs(built: Path) -> None:
    text = (built / "report" / "diffusion_positions.html").read_text()
    rows = set(re.findall(r'<tr id="([^"]+)"', text))
    links = re.findall(r'<a class="runs" href="#([^"]+)">([^<]*)</a>', text)
    assert len(links) > 50 and {target for target, _ in links} <= rows
    assert all(re.search(r"\d", number) for _, number in links)
    assert "#runs-positions-listops-after_embedding" in text
    row = text[text.index('<tr id="runs-positions-listops-after_embedding"') :].split("</tr>")[0]
    assert '<td class="num">2</td>' in row and "listops-hash" in row  # n, the data version
    assert "<details><summary>" in text
    for verdict in re.findall(
        r"<td[^>]*>((?:not measurable here|needs the paper)[^<]*)</td>", text
    ):
        assert "…" not in verdict  # a verdict's reason is never folded nor cut
    report = (built / "REPORT.html").read_text()
    assert 'href="report/diffusion_positions.html#findings-about-the-paper"' in report


BROWSER_PROBE = """<script>
window.addEventListener("load", () => {
  const table = document.querySelector("table");
  const box = table.getBoundingClientRect();
  const header = [...table.querySelectorAll("th")].map((th) => th.textContent.trim());
  document.body.setAttribute("data-probe", JSON.stringify(
    {header, bottom: box.bottom, right: box.right, height: innerHeight, width: innerWidth}));
});
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed")
def test_the_scoreboard_is_the_html_reports_first_screen(built: Path, tmp_path: Path) -> None:
    text = (built / "REPORT.html").read_text()
    probe = built / "probe.html"
    probe.write_text(text.replace("</body>", BROWSER_PROBE + "</body>"))
    dom = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,800"]
        + [f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probe.as_uri()],
        capture_output=True,
        text=True,
        timeout=240,
    )
    found = re.search(r'data-probe="([^"]*)"', dom.stdout)
    assert found, dom.stderr[-2000:]
    shown = json.loads(unescape(found[1]))
    assert shown["header"][:2] == ["paper", "claims"]
    assert shown["bottom"] <= shown["height"] and shown["right"] <= shown["width"], shown


@pytest.mark.parametrize("width", [60, 100])
@pytest.mark.parametrize("study", STUDIES)
def test_show_fits_the_terminal(
    built: Path, study: str, width: int, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    assert cli(["--params", PARAMS, "show", study, "--results", str(built)]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.split("\n"))) <= width
    words = set(re.findall(r"\w+", (built / "tables" / f"{study}.md").read_text()))
    assert words <= set(re.findall(r"\w+", out))  # fitted, nothing left out


@pytest.mark.parametrize("study", STUDIES)
def test_show_csv_reads_with_pandas(built: Path, study: str, capsys) -> None:
    assert cli(["--params", PARAMS, "show", study, "--csv", "--results", str(built)]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert len(frame) > 0 and frame.equals(pd.read_csv(built / "tables" / f"{study}.csv"))


def test_show_of_a_profile_without_its_table_says_so(built: Path, capsys) -> None:
    given = ["--params", PARAMS, "--profile", "paper", "show", "positions"]
    assert cli([*given, "--results", str(built)]) != 0
    err = capsys.readouterr().err
    assert "the paper profile has no table of positions" in err and "smoke" in err

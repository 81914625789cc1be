"""results/REPORT.md, an index that a reader takes in at a glance: which profile made the
results, the scoreboard (each paper's claims by verdict, each count a link,
:mod:`pdelab.report.scoreboard`), the papers' pages, the nondeterminism floor and every run.
Papers are looped over, never named here.

Each paper has its page, results/report/<paper>.md with its HTML page: its own scoreboard, its
claims group by group with every column and every word, each of its studies' tables and
figures followed by the runs behind its numbers (:mod:`pdelab.report.traced`), then its
appendix. Snakemake's report shows HTML inline but Markdown only as a download, so the report's
job also writes each paper's claims section whole as results/claims/<paper>.md with its HTML
page (:func:`claims_pages`), filed under the paper, and REPORT.md's page, results/REPORT.html.

REPORT.md keeps to headline tables: a table with a cell wider than CELL_MAX characters or more
than ROWS_MAX rows is written whole to results/report/<section>.md; REPORT.md links to it and
shows it with its cells cut, each cut row linked to the row in full at the end of its section
(so no reason behind a verdict loses a word), or not at all when it is long
(:func:`headline`). What a table holds is never changed here, only how REPORT.md shows it."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pandas as pd
from tabulate import tabulate

from pdelab.records.atomic import write_text
from pdelab.records.causal_verdict import Causality
from pdelab.records.provenance import edits_phrase, git_state, project_inputs, uncommitted
from pdelab.records.run import tracking_uri
from pdelab.report import floor, traced
from pdelab.report.claims import Claim
from pdelab.report.context import ReportContext
from pdelab.report.page import anchor, write_markdown
from pdelab.report.scoreboard import claims_section, judged, paper_board, scoreboard
from pdelab.report.tables import PROFILE_NOTES, stand_ins
from pdelab.report.verdicts import profile_note
from pdelab.spec.plugins import Paper
from pdelab.spec.studies import heatmap_studies

CELL_MAX = 100  # characters of a table cell in REPORT.md
ROWS_MAX = 40  # body rows of a table in REPORT.md
LONG_TABLES = "report"  # beside REPORT.md: the whole of each table REPORT.md shows cut
CLAIMS = "claims"  # beside REPORT.md: each paper's claims, whole, with its HTML page

RUN_COLUMNS = [
    "task",
    "variant",
    "seed",
    "status",
    "test_acc",
    "test_ppl",
    "causality",
    "best_val_acc",
    "best_epoch",
    "epochs_run",
    "median_step_s",
    "peak_memory_mb",
    "device",
]


def runs_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The Runs table. test_ppl and causality appear only when some run has them (older
    summaries predate them); a leaky run's perplexity is labelled, never shown bare."""

    def has_values(column: str) -> bool:
        values = summary[column].dropna()
        return bool((values.astype(str) != "").any())

    present = [
        c
        for c in RUN_COLUMNS
        if c in summary and (c not in ("test_ppl", "causality") or has_values(c))
    ]
    table = summary[present].copy()
    if "test_ppl" in table:
        leaks = (
            table["causality"].map(lambda v: Causality.parse(v) is Causality.LEAKS)
            if "causality" in table
            else pd.Series(False, index=table.index)
        )
        table["test_ppl"] = [
            "" if pd.isna(p) else f"{p:.4f} (leaks)" if leak else f"{p:.4f}"
            for p, leak in zip(table["test_ppl"], leaks, strict=True)
        ]
    if "causality" in table:
        table["causality"] = table["causality"].fillna("")
    return table


def cut(cell: str, width: int = CELL_MAX) -> str:
    """A cell shortened to ``width`` characters at a word boundary, never inside a link or
    inline code, ending in an ellipsis."""
    if len(cell) <= width:
        return cell
    text = cell[: width - 1].rsplit(" ", 1)[0] if " " in cell[: width - 1] else cell[: width - 1]
    if text.count("`") % 2:  # inside inline code: drop the open span
        text = text[: text.rindex("`")]
    opened = text.rfind("[")
    if opened > text.rfind(")"):  # inside a link: drop it
        text = text[:opened]
    return text.rstrip() + " …"


def row_cells(line: str) -> list[str]:
    """The cells of a Markdown table row (escaped pipes kept)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def slug(heading: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", heading.lower()).strip("_")[:60] or "table"


FULL_ROWS = "**The rows cut above, in full.**"
WHOLE_COLUMNS = ("verdict",)  # never cut: the reason a verdict rests on keeps every word


def headline(lines: list[str], folder: Path, profile: str | None = None) -> list[str]:
    """``lines`` with each long table (a cell over CELL_MAX, or over ROWS_MAX rows) written
    whole to ``folder``/<section>.md and linked: a long one not shown, a wide one shown with
    its cells cut. No word of a cut row is lost from REPORT.md: each cut row ends with a link
    to the row in full, which follows at the end of its section (:func:`full_row`). With a
    ``profile``, each table written whole has its HTML page too."""
    text = "\n".join(lines).split("\n")
    out: list[str] = []
    heading, seen = "report", {}
    numbered: dict[str, int] = {}  # cut rows so far, per first column: each anchor unique
    pending: list[str] = []  # the cut rows of this section, in full
    i = 0
    while i < len(text):
        line = text[i]
        if line.startswith("#"):
            if pending and line.startswith("## "):
                out += [FULL_ROWS, "", *pending]
                pending = []
            heading = line.lstrip("#").strip()
        if not line.startswith("|"):
            out.append(line)
            i += 1
            continue
        j = i
        while j < len(text) and text[j].startswith("|"):
            j += 1
        table = text[i:j]
        rows = [row_cells(r) for r in table]
        body = len(table) - 2
        if body <= ROWS_MAX and all(len(c) <= CELL_MAX for r in rows for c in r):
            out += table
        else:
            name = slug(heading)
            seen[name] = seen.get(name, 0) + 1
            name += f"_{seen[name]}" if seen[name] > 1 else ""
            whole = "\n".join([f"# {heading}", "", *table, ""])
            if profile is None:
                write_text(folder / f"{name}.md", whole)
            else:  # with its page, which REPORT.html links
                write_markdown(folder / f"{name}.md", whole, profile)
            link = f"[{LONG_TABLES}/{name}.md]({LONG_TABLES}/{name}.md)"
            if body > ROWS_MAX:  # a few of its rows would be an arbitrary part: the link alone
                out.append(f"{body} rows, too many to show here: {link}")
            else:
                rule = "|" + "|".join(re.sub("-+", "---", c) for c in rows[1]) + "|"
                kept = {k for k, column in enumerate(rows[0]) if column in WHOLE_COLUMNS}
                shown = [rows[0]]
                for row in rows[2:]:
                    if all(len(c) <= CELL_MAX or k in kept for k, c in enumerate(row)):
                        shown.append(row)
                        continue
                    key = rows[0][0] or "row"
                    numbered[key] = numbered.get(key, 0) + 1
                    title = f"{key} {numbered[key]}"
                    shown.append(cut_row(row, kept, f"[full](#{anchor(title)})"))
                    pending += full_row(title, rows[0], row)
                out += [
                    *("| " + " | ".join(r) + " |" for r in shown[:1]),
                    rule,
                    *("| " + " | ".join(r) + " |" for r in shown[1:]),
                    "",
                    f"Cells cut to {CELL_MAX} characters (a verdict never), each cut row in full "
                    f"at the end of this section ([full]); the whole table: {link}",
                ]
        i = j
    if pending:
        out += ["", FULL_ROWS, "", *pending]
    return out


def cut_row(row: list[str], kept: set[int], link: str) -> list[str]:
    """A row's cells cut to CELL_MAX but the columns ``kept`` whole, its last cut cell ending with
    ``link`` (to the row in full) within the width."""
    long = [k for k, c in enumerate(row) if len(c) > CELL_MAX and k not in kept]
    cells = [cut(c) if k in long else c for k, c in enumerate(row)]
    if long:
        cells[long[-1]] = cut(row[long[-1]], CELL_MAX - len(link) - 1) + f" {link}"
    return cells


def full_row(title: str, header: list[str], row: list[str]) -> list[str]:
    """One table row in full under a heading of its own (the anchor its cut cell links to):
    each non-empty cell after its column's name."""
    cells = [f"- **{name}**: {cell}" for name, cell in zip(header, row, strict=False) if cell]
    return [f"##### {title}", "", *cells, ""]


def contents(lines: list[str]) -> list[str]:
    """A table of contents of the ``## `` headings in ``lines``: a link to each one's anchor,
    numbered as GitHub numbers repeated anchors (``-1``, ``-2``, counting every heading)."""
    entries: list[str] = []
    seen: dict[str, int] = {}
    fenced = False
    for line in "\n".join(lines).split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else re.match(r"(#{1,6})\s+(.+?)\s*$", line)
        if not match:
            continue
        base = anchor(match[2])
        n = seen.get(base, 0)
        seen[base] = n + 1
        if len(match[1]) == 2:
            text = match[2].replace("[", "\\[").replace("]", "\\]")
            entries.append(f"- [{text}](#{base}-{n})" if n else f"- [{text}](#{base})")
    return ["Contents:", "", *entries, ""] if entries else []


def made_at() -> str:
    """The commit the report is made at, with the edits of params.yaml, the papers' config
    files or the source it does not hold (``5cf4f64 plus uncommitted edits to params.yaml
    (1 file)``), in one code span: what the golden test masks as the commit."""
    return git_state()[0] + edits_phrase(uncommitted(project_inputs()))


def rebased(lines: list[str], prefix: str) -> list[str]:
    """Markdown lines whose relative links (``](tables/x.md)``) start from a folder one down:
    each target given ``prefix`` (``../``); anchors and addresses stay as they are."""
    link = re.compile(r"\]\((?!#|[a-z]+:|/)([^)]+)\)")
    return [link.sub(lambda m: f"]({prefix}{m[1]})", line) for line in lines]


def study_section(ctx: ReportContext, name: str, heatmap: bool, ids: dict[str, str]) -> list[str]:
    """A study's table, figures and files, and the runs behind its numbers."""
    table = (ctx.results / "tables" / f"{name}.md").read_text()
    study = ctx.studies[name]
    return [
        f"## {name}",
        "",
        table,
        f"![{name}](figures/{name}.png)",
        "",
        f"![{name} learning curves](figures/{name}_curves.png)",
        "",
        *([f"![{name} heatmap](figures/{name}_heatmap.png)", ""] if heatmap else []),
        f"Files: [tables/{name}.md](tables/{name}.md), [tables/{name}.tex]"
        f"(tables/{name}.tex), [tables/{name}.csv](tables/{name}.csv), "
        f"[figures/{name}.png](figures/{name}.png).",
        "",
        *traced.runs_section(study, ctx.own(name), ctx.profile, ids),
    ]


def paper_page(
    ctx: ReportContext,
    paper: Paper,
    module: ModuleType,
    claims: list[Claim],
    section: list[str],
    made: str,
) -> tuple[str, traced.TracedCells]:
    """A paper's page (results/report/<paper>.md): its own scoreboard, its claims group by
    group, its studies with the runs behind them, its appendix; with the links of its cells."""
    studies = ctx.of_kinds(paper.study_kinds)
    heatmaps = set(heatmap_studies(ctx.studies))
    ids = traced.experiment_ids(ctx.results)
    body = [*section]
    for name in studies:
        body += study_section(ctx, name, name in heatmaps, ids)
    body += module.appendix(ctx)
    board = paper_board(claims) if claims else ["This paper's report audits no claims.", ""]
    head = [
        f"# {paper.title}",
        "",
        f"{made} Part of [the report](REPORT.md): every paper's scoreboard and every run.",
        "",
        *board,
    ]
    lines = rebased([*head, *contents(body), *body], "../")
    trained = {
        name: {(t, v) for t, v in ctx.own(name)[["task", "variant"]].itertuples(index=False)}
        for name in studies
    }
    return "\n".join(lines) + "\n", traced.TracedCells(studies, trained)


def write_report(ctx: ReportContext, papers: list[Paper], out: Path) -> None:
    """REPORT.md from the profile's runs, an index of the papers' pages (results/report/<paper>.md)
    that opens with their scoreboard; papers: the active ones, in params.yaml order."""
    summary, profile = ctx.summary, ctx.profile
    note = PROFILE_NOTES.get(profile, f"profile {profile}")
    made = (
        f"Made by the **{profile}** profile ({note}), from {len(summary)} runs at commit "
        f"`{made_at()}`. Diverged runs: {int((summary['status'] == 'diverged').sum())}."
    )
    header = ["# pdelab report", "", made, ""]
    folder = out.parent / LONG_TABLES
    folder.mkdir(parents=True, exist_ok=True)
    sections: dict[str, list[str]] = {}
    board: list[tuple[str, str, list[Claim]]] = []
    index: list[str] = []
    replicates = sorted((ctx.results / "replicates" / profile).glob("*.json"))
    replicated = floor.read_replicates(replicates)
    floors = floor.floors(replicated)
    pages: list[tuple[Path, str, traced.TracedCells]] = []
    for paper in papers:
        module = paper.report_module()
        claims = floor.flagged(module.claims(ctx), floors)
        shown: list[Claim] = []
        if claims:
            notes = module.claims_notes(ctx) if hasattr(module, "claims_notes") else []
            tasks = sorted(
                {t for s in ctx.of_kinds(paper.study_kinds).values() for t in s["tasks"]}
            )
            marked = stand_ins(summary[summary["task"].isin(tasks)]) if len(summary) else {}
            shown = judged(claims, marked, tasks)
            sections[paper.name] = claims_section(paper.title, shown, profile_note(profile), notes)
        text, links = paper_page(ctx, paper, module, shown, sections.get(paper.name, []), made)
        pages.append((folder / f"{paper.name}.md", text, links))
        write_markdown(*pages[-1][:2], profile, links)
        page = f"{LONG_TABLES}/{paper.name}.md"
        board.append((paper.title, page, shown))
        studies = ", ".join(
            f"[{name}]({page}#{anchor(name)})" for name in ctx.of_kinds(paper.study_kinds)
        )
        index.append(f"- [{paper.title}]({page})" + (f": {studies}" if studies else ""))
    lines = [
        "## Scoreboard",
        "",
        "Each paper's claims by verdict; each count links to those claims on the paper's page.",
        "",
        *scoreboard(board),
    ]
    body = ["## Papers", "", "Each paper's page: its claims, studies and appendix.", "", *index, ""]
    lm_note = (
        " test_ppl: language models' test perplexity, marked (leaks) where the causality probe "
        "found the model reading future tokens: not a result."
        if "test_ppl" in summary and summary["test_ppl"].notna().any()
        else ""
    )
    body += [floor.paragraph(replicated), ""]
    body += [
        "## Runs",
        "",
        "Every run, from `results/summary.parquet` (median step time in seconds; peak memory "
        f"in MB, CUDA max-allocated on a GPU, process resident set on CPU).{lm_note}",
        "",
        tabulate(
            runs_table(summary), headers="keys", tablefmt="github", showindex=False, floatfmt=".4f"
        ),
        "",
        "## Browse the runs",
        "",
        f"Every run is logged to MLflow at `{tracking_uri(shown=True)}`:",
        "",
        "```",
        "mlflow ui --backend-store-uri sqlite:///results/mlflow/mlflow.db",
        "python -m pdelab.tracking links   # each study's and task's runs table",
        "```",
        "",
    ]
    shown_lines = headline([*header, *lines, *body], folder, profile)
    at = len(header) + len(lines)  # the scoreboard first, then the contents
    text = "\n".join([*shown_lines[:at], *contents(shown_lines[at:]), *shown_lines[at:]])
    write_markdown(out, text, profile)
    for page_md, page_text, links in pages:  # again, now that their link back has its page
        write_markdown(page_md, page_text, profile, links)
    claims_pages(papers, sections, profile, out.parent / CLAIMS)


def claims_pages(
    papers: list[Paper], sections: dict[str, list[str]], profile: str, folder: Path
) -> list[Path]:
    """Each paper's claims section whole (findings, run verdicts, coverage), as Markdown and
    its HTML page, ``folder``/<paper>.md and .html; a paper without claims says so."""
    folder.mkdir(parents=True, exist_ok=True)
    pages = []
    for paper in papers:
        lines = sections.get(paper.name) or [
            f"## {paper.title}: the claims audited",
            "",
            "This paper's report audits no claims.",
        ]
        pages.append(write_markdown(folder / f"{paper.name}.md", "\n".join(lines) + "\n", profile))
    return pages

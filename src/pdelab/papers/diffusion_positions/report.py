"""Where to Add PDE Diffusion in the report: its study kinds' tables and figures, its claims,
and the appendix sections (Layer I theory checks, diagnostics)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tabulate import tabulate

from pdelab.papers.diffusion_positions.claims import OVERHEAD_TOLERANCE, claims_table
from pdelab.papers.diffusion_positions.tables import (
    cost_frame,
    multiscale_frame,
    paper_table,
    read_timing,
    seeds_frame,
    timing_note,
)
from pdelab.report.context import ReportContext, StudyContext
from pdelab.report.figures import accuracy_by_variant, paired_bars
from pdelab.report.tables import PROFILE_NOTES, study_frame, write_frame, write_tables


def _note(profile: str) -> str:
    return f"Ours: {PROFILE_NOTES.get(profile, profile)}."


def write_accuracy(s: StudyContext) -> None:
    """Tables 5-6: accuracy per task and position, the gains over the baseline."""
    paper = paper_table(s.study["paper_table"]) if s.study.get("paper_table") else None
    frame = study_frame(s.summary, s.study, paper)
    write_tables(frame, s.title, s.profile, s.md, s.tex, gains_source="paper Table 6")
    accuracy_by_variant(frame, s.title, s.profile, s.figure)


def write_multiscale(s: StudyContext) -> None:
    """Table 7: each stride per position, the best single scale, the multi-scale gain."""
    frame = multiscale_frame(s.summary, s.study)
    write_frame(frame, s.title, f"Test accuracy (fraction). {_note(s.profile)}", s.md, s.tex)
    grid = s.study["grid"]
    rows = frame[frame["position"] != "baseline"]
    labels = [f"{p} {c}" for p in rows["position"] for c in grid[p]]
    paper = [r[f"{c} paper"] for _, r in rows.iterrows() for c in grid[r["position"]]]
    ours = [r[f"{c} ours"] for _, r in rows.iterrows() for c in grid[r["position"]]]
    paired_bars(labels, paper, ours, "test accuracy", s.title, s.profile, s.figure)


def write_seeds(s: StudyContext) -> None:
    """Table 10: mean and std over seeds, each variant's gain with a 95% Welch interval."""
    frame = seeds_frame(s.summary, s.study)
    write_frame(
        frame,
        s.title,
        "Test accuracy (fraction) over seeds; Δ vs baseline with a 95% Welch interval. "
        f"{_note(s.profile)}",
        s.md,
        s.tex,
    )
    baseline = s.study.get("baseline", "baseline")
    rows = frame[frame["variant"] != baseline]
    base = frame[frame["variant"] == baseline].iloc[0]
    half = ((rows["95% CI high"] - rows["95% CI low"]) / 2).fillna(0).tolist()
    paired_bars(
        rows["variant"].tolist(),
        (rows["paper mean"] - base["paper mean"]).tolist(),
        rows["Δ vs baseline"].tolist(),
        "accuracy difference from baseline",
        s.title,
        s.profile,
        s.figure,
        errors=half,
    )


def write_cost(s: StudyContext) -> None:
    """Table 9: step-time and memory overhead over the baseline, from the interleaved step
    timing of results/cost/ (the study's tables are results/tables/<study>.md, so results/
    is two folders up), not from the training runs."""
    timing = read_timing(s.md.parent.parent, s.study)
    frame = cost_frame(timing, s.study)
    write_frame(
        frame,
        s.title,
        f"Overhead over the baseline in percent. {timing_note(timing)} {_note(s.profile)}",
        s.md,
        s.tex,
        floatfmt=".1f",
    )
    paired_bars(
        frame["variant"].tolist(),
        frame["paper time %"].tolist(),
        frame["ours time %"].tolist(),
        "step-time overhead (%)",
        s.title,
        s.profile,
        s.figure,
    )


STUDY_WRITERS: dict[str, Callable[[StudyContext], None]] = {
    "accuracy": write_accuracy,
    "multiscale": write_multiscale,
    "seeds": write_seeds,
    "cost": write_cost,
}


def claims(ctx: ReportContext) -> list[str]:
    """REPORT.md: each headline claim beside ours with a Welch-interval verdict."""
    table = claims_table(ctx)
    if not len(table):
        return []
    return [
        "## Where to add PDE diffusion: the paper's claims",
        "",
        f"Each claim, the paper's number, ours ({ctx.profile} profile), a 95% Welch interval "
        "over seeds and a verdict: reproduced (the interval lies on the claimed side of "
        "zero), not reproduced (on the other side), inconclusive (it contains zero, or too "
        "few seeds). Accuracy differences in points; overheads in percent, from every variant's "
        "training step timed interleaved in one process, with a 95% interval of the median "
        "ratio to the baseline over repeats: reproduced (the interval lies within "
        f"{OVERHEAD_TOLERANCE:g} points of the paper's figure), not reproduced (outside), not "
        "measurable here (the interval is wider than the effect, or holds values of both "
        "outcomes)."
        + (
            " At the smoke scale these verdicts check the pipeline; they say nothing about "
            "the paper."
            if ctx.profile == "smoke"
            else ""
        ),
        "",
        tabulate(table, headers="keys", tablefmt="github", showindex=False, floatfmt="+.2f"),
        "",
    ]


def _section(results: Path, name: str, title: str, intro: str) -> list[str]:
    """A report section showing figures/{name}.png and tables/{name}.md, if they were built."""
    table = results / "tables" / f"{name}.md"
    if not table.exists():
        return []
    return [
        f"## {title}",
        "",
        intro,
        "",
        f"![{name}](figures/{name}.png)",
        "",
        table.read_text(),
        "",
    ]


def appendix(ctx: ReportContext) -> list[str]:
    """REPORT.md: the Layer I theory checks and the diagnostics, when they were built."""
    return _section(
        ctx.results,
        "theory",
        "Theory checks (Layer I)",
        "Properties of the diffusion operator itself, computed exactly (no training): spectrum, "
        "contraction, energy, frequency response, and whether the common replicate-padded "
        "strided Laplacian stays non-expansive.",
    ) + _section(
        ctx.results,
        "diagnostics",
        "Diagnostics the paper left unmeasured",
        "Roughness E(Z) at each insertion point and the diffusion-attention commutator "
        "||[S, A](X)||_F (exact, the paper's linearized form, and the exact first-order term) "
        "of every trained model, per layer, and their correlation with each variant's accuracy "
        "change from the baseline.",
    )

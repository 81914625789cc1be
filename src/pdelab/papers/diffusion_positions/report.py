"""Where to Add PDE Diffusion in the report: its study kinds' tables and figures, its claims,
and the appendix sections (Layer I theory checks, diagnostics)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pdelab.papers.diffusion_positions.claims import (
    OVERHEAD_TOLERANCE,
    paper_claims,
)
from pdelab.papers.diffusion_positions.tables import (
    ACCURACY_COLUMNS,
    cost_data,
    cost_frame,
    in_percent,
    multiscale_data,
    multiscale_frame,
    paper_table,
    read_timing,
    seeds_data,
    seeds_frame,
    timing_note,
)
from pdelab.report.claims import Claim, judged_profile
from pdelab.report.context import ReportContext, StudyContext
from pdelab.report.figures import accuracy_by_variant, paired_bars
from pdelab.report.table_file import TableFile
from pdelab.report.tables import PROFILE_NOTES, accuracy_tables, frame_table, study_frame
from pdelab.report.verdicts import stand_in_text


def _note(profile: str) -> str:
    return f"Ours: {PROFILE_NOTES.get(profile, profile)}."


def write_accuracy(s: StudyContext) -> TableFile:
    """Tables 5-6: accuracy per task and position, the gains over the baseline."""
    paper = paper_table(s.study["paper_table"]) if s.study.get("paper_table") else None
    frame = study_frame(s.summary, s.study, paper)
    accuracy_by_variant(frame, s.title, s.profile, s.figure)
    return accuracy_tables(frame, s.title, s.profile, gains_source="paper Table 6")


MULTISCALE_COMPARISONS = (
    "Two comparisons: *multiscale_gain* is multi-scale minus each source's own best single "
    "scale (ours chosen after the runs); *vs paper's best ours* is multi-scale minus our run of "
    "the single scale the paper found best. The claims judge multi-scale against every single "
    "scale."
)


def write_multiscale(s: StudyContext) -> TableFile:
    """Table 7: each stride per position, the best single scale, the multi-scale gain."""
    frame = multiscale_frame(s.summary, s.study)
    header = f"Test accuracy (%). {MULTISCALE_COMPARISONS} {_note(s.profile)}"
    grid = s.study["grid"]
    rows = frame[frame["position"] != "baseline"]
    labels = [f"{p} {c}" for p in rows["position"] for c in grid[p]]
    paper = [r[f"{c} paper"] for _, r in rows.iterrows() for c in grid[r["position"]]]
    ours = [r[f"{c} ours"] for _, r in rows.iterrows() for c in grid[r["position"]]]
    paired_bars(labels, paper, ours, "test accuracy", s.title, s.profile, s.figure)
    data = multiscale_data(frame, s.summary, s.study)
    return frame_table(in_percent(frame), s.title, header, floatfmt=".2f", data=data)


def write_seeds(s: StudyContext) -> TableFile:
    """Table 10: mean and std over seeds, each variant's gain with its 95% interval."""
    frame = seeds_frame(s.summary, s.study)
    header = (
        "Test accuracy (%) over seeds; Δ vs baseline in points with a 95% t interval over seeds: "
        "paired t over shared seeds, Welch's otherwise (the test column says which). "
        f"{_note(s.profile)}"
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
    data = seeds_data(frame, s.study["tasks"][0], baseline)
    shown = in_percent(frame, ACCURACY_COLUMNS)
    return frame_table(shown, s.title, header, floatfmt=".2f", data=data)


def write_cost(s: StudyContext) -> TableFile:
    """Table 9: step-time and memory overhead over the baseline, from the interleaved step
    timing of results/cost/ (the study's tables are results/tables/<study>.md, so results/
    is two folders up), not from the training runs."""
    timing = read_timing(s.md.parent.parent, s.study)
    frame = cost_frame(timing, s.study)
    header = f"Overhead over the baseline in percent. {timing_note(timing)} {_note(s.profile)}"
    paired_bars(
        frame["variant"].tolist(),
        frame["paper time %"].tolist(),
        frame["ours time %"].tolist(),
        "step-time overhead (%)",
        s.title,
        s.profile,
        s.figure,
    )
    data = cost_data(frame, s.study["tasks"][0])
    return frame_table(frame, s.title, header, floatfmt=".1f", data=data)


STUDY_WRITERS: dict[str, Callable[[StudyContext], TableFile]] = {
    "accuracy": write_accuracy,
    "multiscale": write_multiscale,
    "seeds": write_seeds,
    "cost": write_cost,
}


def claims(ctx: ReportContext) -> list[Claim]:
    """REPORT.md: every claim audited: findings that hold in any profile (theory computed,
    the paper's tables read), then this profile's run verdicts."""
    return paper_claims(ctx)


def claims_notes(ctx: ReportContext) -> list[str]:
    """What the run verdicts rest on: the profile, the data, the comparators, the overheads."""
    found = ctx.find("accuracy")
    tasks = list(found[1]["tasks"]) if found else []
    notes = [
        f"Run-based numbers are from the **{ctx.profile}** profile. "
        + (stand_in_text(ctx.summary, tasks) if tasks and len(ctx.summary) else "")
        + (
            " At this scale the verdicts check the pipeline; they say nothing about the paper."
            if not judged_profile(ctx.profile)
            else ""
        ),
        "A claim of a best is judged against every rival at once: Pred-1 compares after "
        "embedding with each of the other six positions, each multi-scale claim compares "
        "multi-scale with each single scale (Table 7); every pair must be reproduced, and one "
        "pair decided the other way makes the claim not reproduced. Accuracy differences are in "
        "points, averaged over the tasks per seed.",
        "Step-time overheads come from every variant's training step timed interleaved in one "
        "process (95% interval of the median paired ratio over repeats). Only a GPU timing at "
        f"the paper profile is judged: within ±{OVERHEAD_TOLERANCE:g} points of the "
        "paper's figure (half the width of the paper's own \"approximately 5-15%\") is "
        "reproduced, wholly outside not reproduced. The same tolerance reads the text's "
        '"approximately 5-15%" against Table 9\'s own figures.',
    ]
    return notes


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


def diagnostics_intro(profile: str) -> str:
    """What the diagnostics table is: this profile's models, a pipeline check, never support
    for the paper's Layer III argument unless the profile is the paper's."""
    scale = (
        "At this scale it checks that the measurements run end to end; it is not evidence for "
        "or against the paper's Layer III argument."
        if not judged_profile(profile)
        else "A correlation over so few models explains nothing by itself."
    )
    return (
        f"Made from the {profile} profile's trained models. Roughness E(Z) at each insertion "
        "point and the diffusion-attention commutator ||[S, A](X)||_F (exact, the paper's "
        "linearized form, and the exact first-order term), per layer, and their correlation "
        "with each variant's accuracy change from the baseline. Each correlation is computed "
        "within one seed over that seed's models (a task's variants; scope all: every (task, "
        "variant) model of the seed), and its 95% interval runs over the seeds (Fisher's z), "
        "never over the models; one seed gives no interval. With this many correlations, 1 in "
        "20 excludes zero by chance alone. " + scale
    )


def appendix(ctx: ReportContext) -> list[str]:
    """REPORT.md: the Layer I theory checks and the diagnostics, when they were built."""
    return _section(
        ctx.results,
        "theory",
        "Theory checks (Layer I)",
        "Properties of the diffusion operator itself, computed exactly (no training): spectrum, "
        "contraction, energy, frequency response, and whether the common replicate-padded "
        "strided Laplacian stays non-expansive. Three of the paper's statements fail here (the "
        "claims' findings): Eq. 27's lower bound 0 <= 1 - 4 alpha (true only for alpha <= "
        "1/4), Eq. 37's constant (the ratio tends to 2) and Cor. 4.5 for every budget.",
    ) + _section(
        ctx.results,
        "diagnostics",
        f"Diagnostics the paper left unmeasured ({ctx.profile} profile)",
        diagnostics_intro(ctx.profile),
    )

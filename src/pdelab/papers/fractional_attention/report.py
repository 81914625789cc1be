"""Fractional Neural Attention in the report: its study kinds' tables and figures, the audit of
its claims (REPORT.md, before the studies) and the analyses without a study of their own (Figs
2a-c, the z probe; after them).

The writers read, besides their own runs, what each run trained and its curves (runs.py's
files under results/, which the paper declares as every study's inputs).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from pdelab.papers.fractional_attention import (
    CURVES_FILE,
    GRAPH_OUTPUTS,
    PAPER,
    RUNS_FILE,
    TAIL_OUTPUTS,
    THEORY_OUTPUTS,
)
from pdelab.papers.fractional_attention.audit import audit_claims
from pdelab.papers.fractional_attention.figures import (
    ablation_figure,
    accuracy_figure,
    shallow_figure,
)
from pdelab.papers.fractional_attention.tables import (
    MEASURED_AT,
    METRICS,
    ablation_frame,
    accuracy_caption,
    accuracy_frame,
    accuracy_table,
    metric_of,
    others_frame,
    shallow_caption,
    shallow_frame,
    shallow_table,
    tasks_run,
)
from pdelab.report.claims import Claim, judged_profile
from pdelab.report.context import ReportContext, StudyContext
from pdelab.report.table_file import TableFile
from pdelab.report.tables import frame_table
from pdelab.report.verdicts import (
    profile_note,
    stand_in_text,
)

ABLATION_COLUMNS = [
    "task",
    "ablation",
    "reference",
    "ablated",
    "reference acc",
    "ablated acc",
    "Δ ablated − reference [95% CI]",
    "effect",
]


def results_dir(s: StudyContext) -> Path:
    """results/: a study's table is results/tables/<study>.md."""
    return s.md.parent.parent


def write_accuracy(s: StudyContext) -> TableFile:
    """Tables I and III, the ViT: mean, median, best and worst beside the paper's; the bars
    and the curves (Figs 6-7)."""
    runs_path = results_dir(s) / RUNS_FILE
    runs = pd.read_parquet(runs_path) if runs_path.exists() else None
    frame = accuracy_frame(s.summary, s.study, runs)
    caption = accuracy_caption(s.summary, s.study, s.profile, frame)
    curves = pd.read_parquet(results_dir(s) / CURVES_FILE)
    metric = METRICS[metric_of(s.study)]
    accuracy_figure(frame, curves, s.summary, s.title, s.profile, s.figure, metric)
    return frame_table(accuracy_table(frame), s.title, caption, numparse=False)


def write_shallow(s: StudyContext) -> TableFile:
    """Fig 3: accuracy per depth, Q = K or not, mechanism and d."""
    frame = shallow_frame(s.summary, pd.read_parquet(results_dir(s) / RUNS_FILE))
    caption = shallow_caption(s.summary, s.study, s.profile)
    shallow_figure(frame, s.title, s.profile, s.figure)
    return frame_table(shallow_table(frame), s.title, caption, numparse=False)


def write_ablation(s: StudyContext) -> TableFile:
    """The ablations: each pair over seeds and the difference with its 95% interval."""
    frame = ablation_frame(s.summary, s.study)
    others = others_frame(s.summary, s.study)
    context = "; ".join(f"{r.task} {r.variant}: {r.acc}" for r in others.itertuples())
    caption = " ".join(
        p
        for p in [
            "Test accuracy in percent, mean ± std over seeds (n); Δ in points with a 95% t "
            "interval over seeds: paired t over shared seeds, Welch's otherwise (named beside "
            "each interval); effect: changes accuracy where the interval excludes zero with at "
            "least 3 seeds a side, else not measurable here.",
            f"Also trained (context): {context}." if context else "",
            MEASURED_AT,
            profile_note(s.profile),
            stand_in_text(s.summary, s.study["tasks"]),
        ]
        if p
    )
    shown = frame[ABLATION_COLUMNS] if len(frame) else pd.DataFrame(columns=ABLATION_COLUMNS)
    ablation_figure(frame, s.title, s.profile, s.figure)
    return frame_table(shown, s.title, caption, numparse=False)


STUDY_WRITERS: dict[str, Callable[[StudyContext], TableFile]] = {
    "fna_accuracy": write_accuracy,
    "fna_shallow": write_shallow,
    "fna_ablation": write_ablation,
}


def claims(ctx: ReportContext) -> list[Claim]:
    """REPORT.md: the claims audited, before the studies' tables (empty without a study of
    this paper in the profile)."""
    if not ctx.of_kinds(PAPER.study_kinds):
        return []
    return audit_claims(ctx)


def claims_notes(ctx: ReportContext) -> list[str]:
    """The paragraphs after the claims: which profile made the run-based numbers, and the
    stand-ins of the tasks our studies ran."""
    studies = ctx.of_kinds(PAPER.study_kinds)
    if not studies:
        return []
    tasks = sorted({t for n, s in studies.items() for t in tasks_run(ctx.own(n), s)})
    smoke = (
        " At this scale the verdicts check the pipeline; they say nothing about the paper."
        if not judged_profile(ctx.profile)
        else ""
    )
    return [
        f"Run-based numbers: the {ctx.profile} profile's runs. Accuracy differences are in "
        "percentage points, over seeds; Figs 4, 5d and 5e compare one model setting (d, Q = K) "
        "at a time, seed by seed; Fig 5a's correlations are taken within each seed over its "
        "models, their interval over the seeds." + smoke,
        stand_in_text(ctx.summary, tasks),
    ]


def _section(results: Path, title: str, intro: str, table: str, figures: list[str]) -> list[str]:
    """A report section of a table and its figures, if they were built."""
    if not (results / table).exists():
        return []
    shown = [f"![{Path(f).stem}]({f})" for f in figures]
    return [f"## {title}", "", intro, "", *shown, "", (results / table).read_text(), ""]


def appendix(ctx: ReportContext) -> list[str]:
    """REPORT.md: Figs 2a-c (no training), the z probe and Figs 4-5 of trained models."""
    return (
        _section(
            ctx.results,
            "Fractional Neural Attention: Figs 2a-c (no training)",
            "The spectrum of FNA attention on S^1 against j^alpha and j^2, and the three-cluster "
            "toy graph at alpha = 1.2 and 2, recomputed from the official analysis settings.",
            THEORY_OUTPUTS["table"],
            [THEORY_OUTPUTS["spectrum"], THEORY_OUTPUTS["toy_graph"]],
        )
        + _section(
            ctx.results,
            "Fractional Neural Attention: is the power-law tail reached?",
            "Where trained FNA layers put z = dist / kappa, and how far their attention rows are "
            "from the Laplace kernel's on the same distances (the ablation trains that kernel: "
            "see the audit).",
            TAIL_OUTPUTS["table"],
            [TAIL_OUTPUTS["figure"]],
        )
        + _section(
            ctx.results,
            "Fractional Neural Attention: attention graphs of trained shallow models (Figs 4-5)",
            "Edge ablation of layer 0 under the official null and under the same null for DP and "
            "FNA, the spectral gap against accuracy, a diffusion map of one sequence (Q = K), and "
            "shortest-path hop counts on 1/A against the sequence length.",
            GRAPH_OUTPUTS["table"],
            [GRAPH_OUTPUTS["ablation_figure"], GRAPH_OUTPUTS["graph_figure"]],
        )
    )

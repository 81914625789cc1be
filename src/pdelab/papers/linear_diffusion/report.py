"""Linear Diffusion Networks in the report: its study kinds' tables and figures, the audit of
its claims (REPORT.md, before the studies) and the theory checks (after them).

The writers read, besides their own runs, what each run trained (models.py's file under
results/, which the paper declares as every study's input).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from pdelab.papers.linear_diffusion import MODELS_FILE, PAPER, THEORY_OUTPUTS
from pdelab.papers.linear_diffusion.audit import audit_claims, audit_notes
from pdelab.papers.linear_diffusion.figures import ablation_figure, image_figure, lra_figure
from pdelab.papers.linear_diffusion.tables import (
    ablation_caption,
    ablation_frame,
    ablation_table,
    compared,
    image_caption,
    image_frame,
    image_ratios,
    image_table,
    lra_average,
    lra_caption,
    lra_frame,
    lra_table,
    ratio_table,
)
from pdelab.report.claims import Claim
from pdelab.report.context import ReportContext, StudyContext
from pdelab.report.table_file import TableFile
from pdelab.report.tables import frame_table, further_table


def results_dir(s: StudyContext) -> Path:
    """results/: a study's table is results/tables/<study>.md."""
    return s.md.parent.parent


def models(s: StudyContext) -> pd.DataFrame:
    return pd.read_parquet(results_dir(s) / MODELS_FILE)


def write_lra(s: StudyContext) -> TableFile:
    """Table 2: per task the paper's Transformer and LDN beside ours, the difference with its
    95% interval, the average over the tasks both have; bars."""
    frame = lra_frame(s.summary, s.study)
    table = lra_table(frame, lra_average(s.summary, s.study), s.study)
    caption = lra_caption(s.summary, s.study, s.profile)
    ref_row, _, row, _ = compared(s.study)
    lra_figure(frame, (ref_row, row), s.title, s.profile, s.figure)
    return frame_table(table, s.title, caption, numparse=False)


def write_image(s: StudyContext) -> TableFile:
    """Table 1's stand-in: the paper's rows and ours (parameters, MACs, top-1), then the
    LDN / ViT ratios with the accuracy difference's 95% interval."""
    frame = image_frame(s.summary, models(s), s.study)
    ratios = image_ratios(frame, s.study)
    caption = image_caption(s.summary, s.study, s.profile)
    table = frame_table(image_table(frame), s.title, caption, numparse=False)
    if len(ratios):
        table.add(*further_table(ratio_table(ratios), "LDN against ViT", "ratios"))
    image_figure(ratios, s.title, s.profile, s.figure)
    return table


def write_ablation(s: StudyContext) -> TableFile:
    """The ablations against the full LDN, each with its 95% interval."""
    frame = ablation_frame(s.summary, models(s), s.study)
    caption = ablation_caption(s.summary, s.study, s.profile)
    table = ablation_table(frame, s.study.get("baseline", "ldn")) if len(frame) else frame
    ablation_figure(frame, s.title, s.profile, s.figure)
    return frame_table(table, s.title, caption, numparse=False)


STUDY_WRITERS: dict[str, Callable[[StudyContext], TableFile]] = {
    "ldn_lra": write_lra,
    "ldn_image": write_image,
    "ldn_ablation": write_ablation,
}


def claims(ctx: ReportContext) -> list[Claim]:
    """REPORT.md: the claims audited, before the studies' tables."""
    return audit_claims(ctx, PAPER.study_kinds)


def claims_notes(ctx: ReportContext) -> list[str]:
    """REPORT.md: the paragraphs after the claims' tables."""
    return audit_notes(ctx, PAPER.study_kinds)


def appendix(ctx: ReportContext) -> list[str]:
    """REPORT.md: the theory checks (random kernels and trained models)."""
    table = ctx.results / THEORY_OUTPUTS["table"]
    if not table.exists():
        return []
    return [
        "## Linear Diffusion Networks: the theory checked",
        "",
        "Row sums of K and D, Theorem 1's global dependency against T and the width of g, the "
        "largest ‖I + δt K‖₂ the layer can produce (A.4 claims at most 1; the sharp bound is √T), "
        "the drift of the mean token (a measure only: the paper claims row sums, not column "
        "sums), and FLOPs against T; on random and constructed kernels "
        "and on the trained LDN models.",
        "",
        f"![ldn_theory]({THEORY_OUTPUTS['figure']})",
        "",
        table.read_text(),
        "",
    ]

"""Continuous-Time Attention in the report: its study kinds' tables and figures, and the audit
of its claims (REPORT.md)."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from pdelab.papers.continuous_time_attention import PAPER, audit
from pdelab.papers.continuous_time_attention.figures import ppl_bars, ppl_by_seq_len, ppl_by_steps
from pdelab.papers.continuous_time_attention.tables import (
    classification_caption,
    classification_frame,
    classification_table,
    lm_caption,
    lm_frame,
    lm_table,
)
from pdelab.report.claims import Claim
from pdelab.report.context import ReportContext, StudyContext
from pdelab.report.figures import accuracy_by_variant
from pdelab.report.table_file import TableFile
from pdelab.report.tables import frame_table


def write_classification(s: StudyContext) -> TableFile:
    """Tables 1-2: accuracy of standard vs PDE attention (percent), the released code beside."""
    caption = classification_caption(s.summary, s.study, s.profile)
    table = classification_table(s.summary, s.study)
    accuracy_by_variant(
        classification_frame(s.summary, s.study),
        f"{s.title}\nwords: a WordPiece tokenizer trained on each training split stands in "
        "for the paper's bert-base-uncased; imdb_bytes: bytes",
        s.profile,
        s.figure,
        ylabel="test accuracy (%)",
    )
    return frame_table(table, s.title, caption, numparse=False)


def _lm_table(s: StudyContext) -> tuple[pd.DataFrame, TableFile]:
    """The perplexity rows (for the figure) and the study's table."""
    frame = lm_frame(s.summary, s.study)
    caption = lm_caption(frame, s.study, s.profile)
    return frame, frame_table(lm_table(frame, s.study), s.title, caption, numparse=False)


def write_lm(s: StudyContext) -> TableFile:
    """Tables 3-5: perplexity per row (steps, PDE type or model), with the probe's verdicts."""
    frame, table = _lm_table(s)
    if s.study["key"] == "steps":
        ppl_by_steps(frame, s.title, s.profile, s.figure)
    else:
        ppl_bars(frame, s.study["key"], s.title, s.profile, s.figure)
    return table


def write_lm_seq_len(s: StudyContext) -> TableFile:
    """App. B.4: perplexity against sequence length."""
    frame, table = _lm_table(s)
    ppl_by_seq_len(frame, s.title, s.profile, s.figure)
    return table


STUDY_WRITERS: dict[str, Callable[[StudyContext], TableFile]] = {
    "pde_classification": write_classification,
    "lm": write_lm,
    "lm_seq_len": write_lm_seq_len,
}


def claims(ctx: ReportContext) -> list[Claim]:
    """REPORT.md: the claims audited, with the causality probe's verdicts."""
    return audit.claims(ctx, PAPER.study_kinds)


def claims_notes(ctx: ReportContext) -> list[str]:
    """REPORT.md: the paragraphs after the claims (the leak, the baseline, the stand-ins)."""
    return audit.claims_notes(ctx, PAPER.study_kinds)


def appendix(ctx: ReportContext) -> list[str]:
    return []

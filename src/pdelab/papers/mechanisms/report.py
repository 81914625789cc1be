"""The mechanisms study in the report: its table and figure. It makes no claims of a paper, so
it adds no section before or after the studies."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from pdelab.papers.mechanisms import TIMING_FILE
from pdelab.papers.mechanisms.figures import accuracy_vs_step
from pdelab.papers.mechanisms.tables import (
    mechanisms_caption,
    mechanisms_frame,
    mechanisms_table,
)
from pdelab.report.context import ReportContext, StudyContext
from pdelab.report.table_file import TableFile
from pdelab.report.tables import frame_table


def write_mechanisms(s: StudyContext) -> TableFile:
    """Parameters, accuracy, step time and memory per task and mechanism, against the
    baseline; accuracy against step time."""
    results = s.md.parent.parent  # results/tables/<study>.md
    files = [results / TIMING_FILE.format(task=t) for t in s.study["tasks"]]
    timing = pd.concat([pd.read_parquet(f) for f in files if f.exists()] or [pd.DataFrame()])
    frame = mechanisms_frame(s.summary, s.study, timing)
    table = mechanisms_table(frame, s.study.get("baseline", "baseline"))
    accuracy_vs_step(frame, s.title, s.profile, s.figure)
    caption = mechanisms_caption(s.summary, s.study, s.profile)
    return frame_table(table, s.title, caption, numparse=False)


STUDY_WRITERS: dict[str, Callable[[StudyContext], TableFile]] = {"mechanisms": write_mechanisms}


def claims(ctx: ReportContext) -> list[str]:
    return []


def appendix(ctx: ReportContext) -> list[str]:
    return []

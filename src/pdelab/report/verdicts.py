"""Verdicts on a paper's claimed difference from our 95% interval over seeds, and the sentences
every paper's captions share (the profile, the stand-ins). One copy for every paper's tables
and audit: the words the report uses for a verdict mean the same everywhere."""

from __future__ import annotations

import math

import pandas as pd

from pdelab.report.tables import PROFILE_NOTES, stand_ins

REPRODUCED, NOT_REPRODUCED, NOT_MEASURABLE = "reproduced", "not reproduced", "not measurable"
CHANGES = "changes accuracy"


def fmt(x: float, digits: int = 2) -> str:
    return "n/a" if isinstance(x, float) and math.isnan(x) else f"{x:.{digits}f}"


def interval_text(diff: float, low: float, high: float) -> str:
    """'+1.23 [+0.50, +1.96]', or n/a where a side has too few values."""
    if math.isnan(diff):
        return "n/a"
    ci = "n/a" if math.isnan(low) else f"[{low:+.2f}, {high:+.2f}]"
    return f"{diff:+.2f} {ci}"


def difference_verdict(low: float, high: float, sign: int = 1) -> str:
    """A claimed difference of this sign (+1: positive) against its 95% interval: on the
    claimed side, on the other side, or containing zero (or too few seeds): not measurable."""
    if math.isnan(low) or math.isnan(high):
        return f"{NOT_MEASURABLE} (too few seeds)"
    if (low > 0 and sign > 0) or (high < 0 and sign < 0):
        return REPRODUCED
    if (low > 0 and sign < 0) or (high < 0 and sign > 0):
        return NOT_REPRODUCED
    return NOT_MEASURABLE


def change_verdict(low: float, high: float) -> str:
    """Does a change move accuracy at all, either way? Its 95% interval excludes zero."""
    if math.isnan(low) or math.isnan(high):
        return f"{NOT_MEASURABLE} (too few seeds)"
    return CHANGES if low > 0 or high < 0 else NOT_MEASURABLE


def profile_note(profile: str) -> str:
    return f"Ours: {PROFILE_NOTES.get(profile, f'profile {profile}')}."


def stand_in_text(summary: pd.DataFrame, tasks: list[str]) -> str:
    """The stand-ins of these tasks, named (or that the paper's own data was used)."""
    named = stand_ins(summary[summary["task"].isin(tasks)])
    if not named:
        return "Data: the paper's datasets (no stand-in)."
    return "Stand-ins (not the paper's data): " + " ".join(
        f"{task}: {sentence.rstrip('.')}." for task, sentence in named.items()
    )

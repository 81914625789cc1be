"""The sentences every paper's tables and captions share: numbers and intervals as text, the
profile, the stand-ins. Verdicts themselves are the claims kit's (pdelab.report.claims)."""

from __future__ import annotations

import math

import pandas as pd

from pdelab.report.tables import PROFILE_NOTES, stand_ins


def fmt(x: float, digits: int = 2) -> str:
    return "n/a" if isinstance(x, float) and math.isnan(x) else f"{x:.{digits}f}"


def interval_text(diff: float, low: float, high: float) -> str:
    """'+1.23 [+0.50, +1.96]', or n/a where a side has too few values."""
    if math.isnan(diff):
        return "n/a"
    ci = "n/a" if math.isnan(low) else f"[{low:+.2f}, {high:+.2f}]"
    return f"{diff:+.2f} {ci}"


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

"""The run profiles in the report's words, so that a table's caption, its HTML page and REPORT.md
name the profile that made them in one wording (the lowest report module: the table and page
modules both read it)."""

from __future__ import annotations

PROFILE_NOTES = {
    "smoke": "smoke profile: a small CPU run that checks the pipeline; its numbers are not a "
    "reproduction of the paper",
    "paper": "paper profile: the paper's configurations on the full data",
    "paper_mini": "paper_mini profile: the paper's configurations for one epoch on a few "
    "hundred examples per task, a GPU check of the paper path; not a reproduction",
}
NO_PROFILE = "Made without training: the same under every run profile."


def profile_line(profile: str | None) -> str:
    """Which run profile made a table (None: one made without training), as its page says it."""
    if profile is None:
        return NO_PROFILE
    return f"Made by the {PROFILE_NOTES.get(profile, f'{profile} profile')}."

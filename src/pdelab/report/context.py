"""What the report hands a paper's writers: one study's runs and output paths, or the whole
summary for its claims and appendix. Papers see studies through these, never by name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pdelab.report.stats import own_runs


@dataclass(frozen=True)
class StudyContext:
    """One study: its params.yaml block, its own runs (its seeds only) and where to write."""

    name: str
    cfg: dict[str, Any]
    summary: pd.DataFrame
    profile: str
    md: Path
    tex: Path
    figure: Path

    @property
    def title(self) -> str:
        return self.cfg.get("title", self.name)


@dataclass(frozen=True)
class ReportContext:
    """Every run of the profile, every study, and each study's (task, variant, seed) keys."""

    summary: pd.DataFrame
    studies: dict[str, dict[str, Any]]
    profile: str
    results: Path
    runs: dict[str, set] | None = None

    def find(self, kind: str, key: str | None = None) -> tuple[str, dict[str, Any]] | None:
        """The first study (params.yaml order) of a kind, and with this `key` if given."""
        for name, cfg in self.studies.items():
            if cfg.get("kind", "accuracy") == kind and (key is None or cfg.get("key") == key):
                return name, cfg
        return None

    def of_kinds(self, kinds: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        return {n: c for n, c in self.studies.items() if c.get("kind", "accuracy") in kinds}

    def own(self, name: str | None) -> pd.DataFrame:
        """The runs of one study, as its table uses them (every run when runs is not given)."""
        if name is None or self.runs is None or name not in self.runs:
            return self.summary
        return own_runs(self.summary, self.runs[name])
